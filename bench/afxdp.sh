#!/usr/bin/env bash
# goverbs on AF_XDP against goverbs on the UDP backend over the same veth pair between two
# network namespaces, at MTU 1500 (issue 33's figures): busy-poll 8 B send_lat (one-way,
# median), 8 B RDMA WRITE message rate (default and busy-poll) and RC WRITE 64 KiB
# bandwidth, with the plain Go UDP spinning ping-pong (nettest udp_lat --busy-poll) as the
# floor a Go program reaches through the kernel. Every figure's baseline is measured in
# the same round; rounds are interleaved.
#
#   bench/afxdp.sh [OUTDIR]          (default: bench/results-afxdp)
#
# Environment: ROUNDS=3, DURATION=3 (seconds per bandwidth/rate run), ITERS=20000 (round
# trips per latency run), MTU=1500, QUEUE=0.
#
# Needs root and iproute2 (skips, exit 0, without them), a kernel with AF_XDP, and a
# goverbs whose GOVERBS_DEVICES understands an AF_XDP device,
#   NAME=ADDR[:PORT]@xdp:IFACE[/QUEUE]
# (docs/guide/afxdp.md); it stops with a message if the binary does not. veth has no AF_XDP
# zero-copy: the socket runs in copy mode, the program in veth's native XDP. Both veth
# ends get one queue each way, so that every datagram reaches the queue the socket is
# bound to. Everything lives in the two namespaces, deleted on exit with the veth pair;
# no traffic leaves them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then echo "afxdp.sh: skipped: namespaces and XDP need root" >&2; exit 0; fi
if ! command -v ip >/dev/null; then echo "afxdp.sh: skipped: no ip (iproute2)" >&2; exit 0; fi
out=${1:-bench/results-afxdp}
R=${ROUNDS:-3} D=${DURATION:-3} N=${ITERS:-20000} MTU=${MTU:-1500} Q=${QUEUE:-0}
repro="ROUNDS=$R DURATION=$D ITERS=$N MTU=$MTU bench/afxdp.sh $out"
mkdir -p "$out"
rm -f "$out"/*.json "$out/log.txt"
. bench/lib.sh

# Server side A, client side B, as bench/veth.sh; TEST-NET-1 addresses (RFC 5737).
A=gvxbench-a-$$ B=gvxbench-b-$$ S=192.0.2.1 C=192.0.2.2
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
if ! "${inA[@]}" "${xA[@]}" "$g" devinfo -d xdp0 >"$out/devinfo.txt" 2>&1; then
  echo "afxdp.sh: this goverbs cannot open an AF_XDP device from GOVERBS_DEVICES:" >&2
  cat "$out/devinfo.txt" >&2
  echo "afxdp.sh: wire netio/afxdp into SoftConfig and GOVERBS_DEVICES first (docs/guide/afxdp.md)" >&2
  exit 1
fi

for round in $(seq "$R"); do
  # Latency, busy-poll: Go UDP spinning, the UDP backend, AF_XDP.
  pair udp_lat_busy $round "${inA[@]}" $n udp_lat --bind $S --busy-poll -- "${inB[@]}" $n udp_lat --bind $C -s 8 -n $N --busy-poll $S
  pair send_lat_busy $round "${inA[@]}" $g send_lat --bind $S -s 8 -n $N --json --busy-poll -- \
    "${inB[@]}" $g send_lat --bind $C -s 8 -n $N --json --busy-poll $S
  pair xdp_send_lat_busy $round "${inA[@]}" "${xA[@]}" $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll -- \
    "${inB[@]}" "${xB[@]}" $g send_lat -d xdp0 -s 8 -n $N --json --busy-poll $S
  # 8 B WRITE message rate, default and busy-poll.
  pair write_bw_8 $round "${inA[@]}" $g write_bw --bind $S --json -- "${inB[@]}" $g write_bw --bind $C -s 8 -D $D --json $S
  pair xdp_write_bw_8 $round "${inA[@]}" "${xA[@]}" $g write_bw -d xdp0 --json -- \
    "${inB[@]}" "${xB[@]}" $g write_bw -d xdp0 -s 8 -D $D --json $S
  pair write_bw_8_busy $round "${inA[@]}" $g write_bw --bind $S --json --busy-poll -- \
    "${inB[@]}" $g write_bw --bind $C -s 8 -D $D --json --busy-poll $S
  pair xdp_write_bw_8_busy $round "${inA[@]}" "${xA[@]}" $g write_bw -d xdp0 --json --busy-poll -- \
    "${inB[@]}" "${xB[@]}" $g write_bw -d xdp0 -s 8 -D $D --json --busy-poll $S
  # RC WRITE 64 KiB.
  pair write_bw $round "${inA[@]}" $g write_bw --bind $S --json -- "${inB[@]}" $g write_bw --bind $C -s 65536 -D $D --json $S
  pair xdp_write_bw $round "${inA[@]}" "${xA[@]}" $g write_bw -d xdp0 --json -- \
    "${inB[@]}" "${xB[@]}" $g write_bw -d xdp0 -s 65536 -D $D --json $S
done
{
  echo "veth pair between two namespaces, MTU $MTU, AF_XDP in copy mode (veth), $R interleaved rounds, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ). Reproduce: \`$repro\`"
  echo
  "$bin/report" -dir "$out"
} | tee "$out/table.md"
echo "reproduce with: $repro" >&2
report_failures
