#!/usr/bin/env bash
# Benchmark goverbs against Go TCP and UDP on loopback, two processes per test, every
# figure next to its baseline measured in the same run, and a bandwidth/size sweep plot.
#
#   bench/compare.sh [OUTDIR]        (default: bench/results)
#
# ROUNDS (default 3) runs every comparison that many times, the tests interleaved round
# by round, and the table reports medians: single runs on a small shared VM move by 10%
# and more, baselines included. DURATION (s, default 3) and ITERS (default 20000) size
# each bandwidth and latency run.
#
# Uses only Go and this repository. Each side binds its own loopback address
# (127.50.0.2 serves, 127.50.0.3 is the client); nothing leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"; pkill -f "$bin/" 2>/dev/null || true' EXIT
go build -o "$bin/goverbs" ./cmd/goverbs
go build -o "$bin/nettest" ./bench/nettest
go build -o "$bin/report" ./bench/report
S=127.50.0.2 C=127.50.0.3 D=${DURATION:-3} N=${ITERS:-20000} R=${ROUNDS:-3}

# pair NAME SERVER-CMD... -- CLIENT-CMD...: run the server in the background, the client
# in the foreground, append the client's JSON row to NAME.json.
pair() {
  local name=$1; shift
  local srv=() cli=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done; shift
  cli=("$@")
  "${srv[@]}" >/dev/null 2>&1 &
  local pid=$!
  sleep 0.5
  echo "== $name" >&2
  timeout 120 "${cli[@]}" | tee -a "$out/$name.json" >&2
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  sleep 0.5
}
g="$bin/goverbs"; n="$bin/nettest"
rm -f "$out"/*.json
for round in $(seq "$R"); do
  echo "== round $round of $R" >&2
  pair tcp_bw     $n tcp_bw --bind $S -- $n tcp_bw --bind $C -s 65536 -D $D $S
  for t in write_bw send_bw read_bw; do
    pair $t       $g $t --bind $S --json -- $g $t --bind $C -s 65536 -D $D --json $S
  done
  pair write_bw_8 $g write_bw --bind $S --json -- $g write_bw --bind $C -s 8 -D $D --json $S
  pair udp_lat    $n udp_lat --bind $S -s 8 -- $n udp_lat --bind $C -s 8 -n $N $S
  pair udp_lat_busy $n udp_lat --bind $S -s 8 --busy-poll -- $n udp_lat --bind $C -s 8 -n $N --busy-poll $S
  for t in send_lat write_lat; do
    pair $t        $g $t --bind $S -s 8 -n $N --json -- $g $t --bind $C -s 8 -n $N --json $S
    pair ${t}_busy $g $t --bind $S -s 8 -n $N --json --busy-poll -- $g $t --bind $C -s 8 -n $N --json --busy-poll $S
  done
done
# Size sweep: goverbs write_bw -a against TCP at the same sizes.
pair sweep_goverbs_write_bw $g write_bw --bind $S -a --json -- $g write_bw --bind $C -a -n 1000 --json $S
for s in 2 8 32 128 512 2048 8192 32768 131072 524288 2097152 8388608; do
  pair sweep_go_tcp $n tcp_bw --bind $S -- $n tcp_bw --bind $C -s $s -D 1 $S
done
"$bin/report" -dir "$out" -svg "$out/bandwidth.svg" | tee "$out/table.md"
