#!/usr/bin/env bash
# The latency pairs of bench/compare.sh alone, for work on latency: Go UDP 8 B ping-pong
# (netpoller, and spinning) against RC SEND and WRITE 8 B latency in the default and
# busy-poll modes, two processes on loopback, interleaved rounds, the same table.
#
#   bench/latency.sh [OUTDIR]        (default: bench/results-lat)
#
# Environment: ROUNDS=3, ITERS=20000 (round trips per run), BUSY=1 (0 skips busy-poll).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results-lat}
R=${ROUNDS:-3} N=${ITERS:-20000} BUSY=${BUSY:-1}
S=127.50.0.2 C=127.50.0.3
repro="ROUNDS=$R ITERS=$N BUSY=$BUSY bench/latency.sh $out"
mkdir -p "$out"
rm -f "$out"/*.json "$out/log.txt"
. bench/lib.sh
build
echo "$repro" >&2

for round in $(seq "$R"); do
  pair udp_lat $round $n udp_lat --bind $S -- $n udp_lat --bind $C -s 8 -n $N $S
  for t in send_lat write_lat; do
    pair $t $round $g $t --bind $S -s 8 -n $N --json -- $g $t --bind $C -s 8 -n $N --json $S
  done
  pair send_lat_ev $round $g send_lat --bind $S -s 8 -n $N --json -e -- $g send_lat --bind $C -s 8 -n $N --json -e $S
  [ "$BUSY" = 0 ] && continue
  pair udp_lat_busy $round $n udp_lat --bind $S --busy-poll -- $n udp_lat --bind $C -s 8 -n $N --busy-poll $S
  for t in send_lat write_lat; do
    pair ${t}_busy $round $g $t --bind $S -s 8 -n $N --json --busy-poll -- $g $t --bind $C -s 8 -n $N --json --busy-poll $S
  done
done

{
  echo "Two processes on loopback, $R interleaved rounds, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ). Reproduce: \`$repro\`"
  echo
  "$bin/report" -dir "$out"
} | tee "$out/table.md"
echo "reproduce with: $repro" >&2
report_failures
