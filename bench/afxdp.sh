#!/usr/bin/env bash
# goverbs on AF_XDP against goverbs on the UDP backend and against the Go programs a user
# would write instead, over the same veth pair between two network namespaces at MTU 1500
# (issue 33's figures). Every figure's baselines are measured in the same round; rounds
# are interleaved.
#
#   bench/afxdp.sh [OUTDIR]          (default: docs/perf/afxdp)
#
# Rows go to OUTDIR as bench/compare.sh's and bench/samehost.sh's do (JSON per test,
# meta.json, log.txt), the tables come from bench/report, and with the default OUTDIR the
# run regenerates docs/PERFORMANCE.md.
#
# Per round (AF_XDP run, then its baselines):
#   xdp_send_lat_busy    RC SEND 8 B one-way, busy-poll     send_lat_busy (UDP backend),
#                                                           udp_lat_busy (Go UDP spinning),
#                                                           udp_lat_rcwire (the same, RC's datagrams)
#   xdp_send_lat_busy_generic  the same, the program in generic XDP ("+generic")
#   xdp_write_bw_8       RC WRITE 8 B message rate          write_bw_8, udp_rate (Go 8 B writes)
#   xdp_write_bw_8_busy  the same, busy-poll                write_bw_8_busy, udp_rate
#   xdp_write_bw         RC WRITE 64 KiB bandwidth          write_bw, tcp_bw (Go TCP stream)
# and the UDP backend's two rates once more with both veth ends at gso_max_segs 1
# (write_bw_8_seg, write_bw_seg): each datagram then crosses the veth pair as a packet of
# its own, as on a wire without segmentation offload, where by default veth hands a GSO
# run of up to 64 datagrams to the receiving socket whole (docs/guide/afxdp.md, "Why
# the UDP backend's rates on veth are out of reach").
# After the rounds each test runs once more with its client under perf stat (system calls
# and context switches, syscalls.json; skipped without perf), not timed.
#
# Environment: ROUNDS=3, DURATION=3 (seconds per bandwidth/rate run), ITERS=20000 (round
# trips per latency run), MTU=1500, QUEUE=0, COUNT=1 (0: no perf stat pass).
#
# Needs root and iproute2 (skips, exit 0, without them), a kernel with AF_XDP, and a
# goverbs whose GOVERBS_DEVICES understands an AF_XDP device,
#   NAME=ADDR[:PORT]@xdp:IFACE[/QUEUE]
# (docs/guide/afxdp.md). veth has no AF_XDP zero-copy: the socket runs in copy mode, the
# program in veth's native XDP. Both veth ends get one queue each way, so that every
# datagram reaches the queue the socket is bound to. Everything lives in the two
# namespaces, deleted on exit with the veth pair; no traffic leaves them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then echo "afxdp.sh: skipped: namespaces and XDP need root" >&2; exit 0; fi
if ! command -v ip >/dev/null; then echo "afxdp.sh: skipped: no ip (iproute2)" >&2; exit 0; fi
out=${1:-docs/perf/afxdp}
R=${ROUNDS:-3} D=${DURATION:-3} N=${ITERS:-20000} MTU=${MTU:-1500} Q=${QUEUE:-0} COUNT=${COUNT:-1}
repro="ROUNDS=$R DURATION=$D ITERS=$N MTU=$MTU bench/afxdp.sh $out"
mkdir -p "$out"
. bench/lib.sh
. bench/meta.sh
# meta.json is made before the last run's rows go: they are committed, and git describe
# --dirty would call the tree dirty without them.
write_meta "$bin/meta" "$repro"
rm -f "$out"/*.json "$out/log.txt"
mv "$bin/meta/meta.json" "$out/meta.json"

# Server side A, client side B, as bench/veth.sh; TEST-NET-1 addresses (RFC 5737).
A=gvx-bench-a-$$ B=gvx-bench-b-$$ S=192.0.2.1 C=192.0.2.2
remove_namespaces() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
cleanup_hooks+=(remove_namespaces)
ip netns add "$A"
ip netns add "$B"
ip -n "$A" link add va mtu "$MTU" numtxqueues 1 numrxqueues 1 type veth \
  peer name vb mtu "$MTU" numtxqueues 1 numrxqueues 1 netns "$B"
ip -n "$A" addr add $S/24 dev va
ip -n "$B" addr add $C/24 dev vb
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set va up
ip -n "$B" link set vb up
build
echo "$repro" >&2
inA=(ip netns exec "$A") inB=(ip netns exec "$B")
# The AF_XDP devices, one per namespace; the UDP backend's are opened with --bind.
xA=(env "GOVERBS_DEVICES=xdp0=$S@xdp:va/$Q") xB=(env "GOVERBS_DEVICES=xdp0=$C@xdp:vb/$Q")
xAg=(env "GOVERBS_DEVICES=xdp0=$S@xdp:va/$Q+generic") xBg=(env "GOVERBS_DEVICES=xdp0=$C@xdp:vb/$Q+generic")
if ! "${inA[@]}" "${xA[@]}" "$g" devinfo -d xdp0 >"$out/devinfo.txt" 2>&1; then
  echo "afxdp.sh: this goverbs cannot open an AF_XDP device from GOVERBS_DEVICES:" >&2
  cat "$out/devinfo.txt" >&2
  echo "afxdp.sh: wire netio/afxdp into SoftConfig and GOVERBS_DEVICES first (docs/guide/afxdp.md)" >&2
  exit 1
fi

# The runs, by name: server command, "--", client command (the client prints the row).
declare -A run
run[udp_lat_busy]="${inA[*]} $n udp_lat --bind $S --busy-poll -- ${inB[*]} $n udp_lat --bind $C -s 8 -n $N --busy-poll $S"
run[udp_lat_rcwire]="${inA[*]} $n udp_lat --bind $S --busy-poll --rc-wire -- ${inB[*]} $n udp_lat --bind $C -s 8 -n $N --busy-poll --rc-wire $S"
run[send_lat_busy]="${inA[*]} $g send_lat --bind $S -s 8 -n $N --json --busy-poll -- ${inB[*]} $g send_lat --bind $C -s 8 -n $N --json --busy-poll $S"
run[xdp_send_lat_busy]="${inA[*]} ${xA[*]} $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll -- ${inB[*]} ${xB[*]} $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll $S"
# The same with the program in generic XDP on both ends ("+generic"): on veth it skips
# the copy native XDP makes of each skb (docs/guide/afxdp.md, "Generic XDP on veth").
run[xdp_send_lat_busy_generic]="${inA[*]} ${xAg[*]} $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll -- ${inB[*]} ${xBg[*]} $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll $S"
run[udp_rate]="${inA[*]} $n udp_rate --bind $S -- ${inB[*]} $n udp_rate --bind $C -s 8 -D $D $S"
run[write_bw_8]="${inA[*]} $g write_bw --bind $S --json -- ${inB[*]} $g write_bw --bind $C -s 8 -D $D --json $S"
run[xdp_write_bw_8]="${inA[*]} ${xA[*]} $g write_bw -d xdp0 --json -- ${inB[*]} ${xB[*]} $g write_bw -d xdp0 -s 8 -D $D --json $S"
run[write_bw_8_busy]="${inA[*]} $g write_bw --bind $S --json --busy-poll -- ${inB[*]} $g write_bw --bind $C -s 8 -D $D --json --busy-poll $S"
run[xdp_write_bw_8_busy]="${inA[*]} ${xA[*]} $g write_bw -d xdp0 --json --busy-poll -- ${inB[*]} ${xB[*]} $g write_bw -d xdp0 -s 8 -D $D --json --busy-poll $S"
run[tcp_bw]="${inA[*]} $n tcp_bw --bind $S -- ${inB[*]} $n tcp_bw --bind $C -s 65536 -D $D $S"
run[write_bw]="${inA[*]} $g write_bw --bind $S --json -- ${inB[*]} $g write_bw --bind $C -s 65536 -D $D --json $S"
run[xdp_write_bw]="${inA[*]} ${xA[*]} $g write_bw -d xdp0 --json -- ${inB[*]} ${xB[*]} $g write_bw -d xdp0 -s 65536 -D $D --json $S"
# The UDP backend's rates with each datagram a packet of its own on the veth pair (seg on).
run[write_bw_8_seg]=${run[write_bw_8]}
run[write_bw_seg]=${run[write_bw]}
order=(udp_lat_busy udp_lat_rcwire send_lat_busy xdp_send_lat_busy xdp_send_lat_busy_generic
  udp_rate write_bw_8 xdp_write_bw_8 write_bw_8_seg write_bw_8_busy xdp_write_bw_8_busy
  tcp_bw write_bw xdp_write_bw write_bw_seg)

# seg on|off: with on, both veth ends take GSO runs of at most one segment, so that the
# kernel segments a UDP GSO send before veth (validate_xmit_skb) and each datagram
# reaches the receiver as an skb of its own; off puts the pair's default back.
gso_segs=$(ip -n "$A" -d link show va | sed -n 's/.*gso_max_segs \([0-9]*\).*/\1/p')
seg() {
  local n=${gso_segs:-65535}
  [ "$1" = on ] && n=1
  ip -n "$A" link set va gso_max_segs "$n"
  ip -n "$B" link set vb gso_max_segs "$n"
}

# The GSO runs' pairs with the veth pair's segmentation on (seg), the rounds, then each
# pair once more under perf stat (bench/lib.sh's run_pairs).
pair_setup() { if [[ $1 == *_seg ]]; then seg "$2"; fi; }
run_pairs

echo "veth pair between two namespaces, MTU $MTU, AF_XDP in copy mode (veth), $R interleaved rounds. Reproduce: \`$repro\`"
echo
"$bin/report" -afxdp "$out"
write_page "$out"
echo "reproduce with: $repro" >&2
report_failures
