#!/usr/bin/env bash
# goverbs RC WRITE 64 KiB against a Go TCP stream over a real Ethernet MTU: two network
# namespaces joined by a veth pair, the server in one and the client in the other, at
# each MTU in MTUS. goverbs takes its IB MTU from the interface as rxe does (interface
# MTU − 80, rounded down: 1500 gives 1024, 9000 gives 4096); TCP hands the kernel 64 KiB
# segments whatever the MTU.
#
#   bench/veth.sh [OUTDIR]           (default: docs/perf/veth; one directory per MTU)
#
# With the default OUTDIR the run regenerates docs/PERFORMANCE.md (see bench/compare.sh).
#
# Environment: ROUNDS=3, DURATION=3 (seconds per run), MTUS="1500 9000", and LOSS (a
# percentage, e.g. LOSS=1) to drop that share of packets both ways with netem.
#
# Needs root and iproute2 (skips, exit 0, without them). Everything it creates lives in
# its two namespaces, which are deleted on exit (with them the veth pair); no traffic
# leaves them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then echo "veth.sh: skipped: network namespaces need root" >&2; exit 0; fi
if ! command -v ip >/dev/null; then echo "veth.sh: skipped: no ip (iproute2)" >&2; exit 0; fi
if [ -n "${LOSS:-}" ] && ! command -v tc >/dev/null; then echo "veth.sh: LOSS needs tc (iproute2)" >&2; exit 1; fi
out=${1:-docs/perf/veth}
R=${ROUNDS:-3} D=${DURATION:-3} MTUS=${MTUS:-1500 9000}
repro="ROUNDS=$R DURATION=$D MTUS=\"$MTUS\"${LOSS:+ LOSS=$LOSS} bench/veth.sh $out"
mkdir -p "$out"
. bench/lib.sh
. bench/meta.sh

# Server side A, client side B; addresses from TEST-NET-1 (RFC 5737), which exist only
# inside these namespaces.
A=gvbench-a-$$ B=gvbench-b-$$ S=192.0.2.1 C=192.0.2.2
remove_namespaces() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
cleanup_hooks+=(remove_namespaces)
. bench/vethpair.sh
veth_pair "$A" "$B" $S $C
if [ -n "${LOSS:-}" ]; then
  if ! { ip netns exec "$A" tc qdisc add dev va root netem loss "$LOSS%" &&
         ip netns exec "$B" tc qdisc add dev vb root netem loss "$LOSS%"; }; then
    echo "veth.sh: LOSS needs tc's netem qdisc (kernel module sch_netem)" >&2
    exit 1
  fi
fi
build
rm -rf "$out"/mtu*
write_meta "$out" "$repro"
echo "$repro" >&2
inA=(ip netns exec "$A") inB=(ip netns exec "$B")

for mtu in $MTUS; do
  ip -n "$A" link set va mtu "$mtu"
  ip -n "$B" link set vb mtu "$mtu"
  out_all=$out out=$out/mtu$mtu
  mkdir -p "$out"
  rm -f "$out"/*.json "$out/log.txt"
  # Odd rounds run TCP first, even rounds goverbs first (lib.sh run_queued).
  for round in $(seq "$R"); do
    queue tcp_bw   "${inA[@]}" $n tcp_bw --bind $S -- "${inB[@]}" $n tcp_bw --bind $C -s 65536 -D $D $S
    queue write_bw "${inA[@]}" $g write_bw --bind $S --json -- "${inB[@]}" $g write_bw --bind $C -s 65536 -D $D --json $S
    run_queued "$round"
  done
  out=$out_all
done
echo "veth pair between two namespaces${LOSS:+, $LOSS% loss each way}, $R interleaved rounds. Reproduce: \`$repro\`"
echo
"$bin/report" -veth "$out"
write_page "$out"
echo "reproduce with: $repro" >&2
report_failures
