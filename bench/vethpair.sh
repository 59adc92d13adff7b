# Sourced by bench/veth.sh and bench/rstream.sh: veth_pair A B ADDR_A ADDR_B makes two
# network namespaces joined by a veth pair (va in A with ADDR_A/24, vb in B with
# ADDR_B/24), links up. The caller deletes the namespaces (with them the pair).
veth_pair() {
  ip netns add "$1"
  ip netns add "$2"
  ip -n "$1" link add va type veth peer name vb netns "$2"
  ip -n "$1" addr add "$3/24" dev va
  ip -n "$2" addr add "$4/24" dev vb
  ip -n "$1" link set lo up
  ip -n "$2" link set lo up
  ip -n "$1" link set va up
  ip -n "$2" link set vb up
}
