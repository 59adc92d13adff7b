#!/usr/bin/env bash
# Benchmark the same-host shortcut (issue 28): two goverbs processes on one host, their
# datagrams through shared memory (GOVERBS_SHM=1) against the same tools with
# GOVERBS_SHM=0 (the kernel's UDP path), and against Go's unix-socket ping-pong, every
# figure next to its baseline measured in the same round.
#
#   bench/samehost.sh [OUTDIR]        (default: docs/perf/samehost)
#
# Rows go to OUTDIR as bench/compare.sh's do (JSON per test, meta.json, log.txt), and the
# table comes from bench/report. Environment: ROUNDS=3 (interleaved rounds), DURATION=3
# (seconds per bandwidth and message-rate run), ITERS=20000 (round trips per latency run),
# COUNT=1 (after the rounds, each pair once more under perf stat: syscalls.json; 0 skips).
#
# Pairs per round (shm run, then its baseline):
#   shm_send_lat_busy  vs send_lat_busy   RC SEND 8 B one-way, busy-poll, shm vs UDP
#   shm_send_lat_busy  vs shm_lat         the same vs the machine's floor: 8 bytes handed
#                                         to the other process and back through a mapped
#                                         file, both spinning (nettest shm_lat), which
#                                         differs several times between machines
#   shm_send_lat_ev    vs unix_lat        RC SEND 8 B blocked on the completion channel (-e)
#                                         vs Go's unix-socket 8 B ping-pong (netpoller)
#   send_lat_ev        (UDP, -e)          the same over UDP, for the ratio issue 28 quotes
#   shm_write_bw       vs write_bw        RC WRITE 64 KiB bandwidth, shm vs UDP
#   shm_write_bw_8     vs write_bw_8      RC WRITE 8 B message rate, shm vs UDP
#   shm_write_bw_8_busy vs write_bw_8_busy the same with --busy-poll on both sides
#   shm_write_bw_8(_busy) vs udp_rate     the same rates vs Go's 8 B UDP datagrams, one
#                                         write each, delivered (what a Go user would send)
#   shm_send_lat_busy  vs tcp_lat_busy_8  the same busy-poll latency vs Go's TCP 8 B
#                                         ping-pong, spinning (what a Go user would use)
#   shm_write_bw       vs tcp_bw          the same bandwidth vs a Go TCP stream of
#                                         64 KiB writes
#
# Uses only Go and this repository; 127.51.0.2 serves, 127.51.0.3 is the client.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/perf/samehost}
R=${ROUNDS:-3} D=${DURATION:-3} N=${ITERS:-20000}
S=127.51.0.2 C=127.51.0.3
repro="ROUNDS=$R DURATION=$D ITERS=$N bench/samehost.sh $out"
. bench/lib.sh
. bench/meta.sh
# The run's description first: git describe must see the tree before the last run's
# committed rows are removed, or every run would call its commit dirty.
write_meta "$bin" "$repro"
mkdir -p "$out"
rm -f "$out"/*.json "$out/log.txt"
mv "$bin/meta.json" "$out/meta.json"
build
echo "$repro" >&2

shm="env GOVERBS_SHM=1" udp="env GOVERBS_SHM=0"
declare -A run
run[shm_send_lat_busy]="$shm $g send_lat --bind $S -s 8 -n $N --json --busy-poll -- $shm $g send_lat --bind $C -s 8 -n $N --json --busy-poll $S"
run[shm_lat]="$n shm_lat --bind $S -- $n shm_lat --bind $C -s 8 -n $N $S"
run[send_lat_busy]="$udp $g send_lat --bind $S -s 8 -n $N --json --busy-poll -- $udp $g send_lat --bind $C -s 8 -n $N --json --busy-poll $S"
run[shm_send_lat_ev]="$shm $g send_lat --bind $S -s 8 -n $N --json -e -- $shm $g send_lat --bind $C -s 8 -n $N --json -e $S"
run[unix_lat]="$n unix_lat --bind $S -- $n unix_lat --bind $C -s 8 -n $N $S"
run[send_lat_ev]="$udp $g send_lat --bind $S -s 8 -n $N --json -e -- $udp $g send_lat --bind $C -s 8 -n $N --json -e $S"
run[shm_write_bw]="$shm $g write_bw --bind $S --json -- $shm $g write_bw --bind $C -s 65536 -D $D --json $S"
run[write_bw]="$udp $g write_bw --bind $S --json -- $udp $g write_bw --bind $C -s 65536 -D $D --json $S"
run[shm_write_bw_8]="$shm $g write_bw --bind $S --json -- $shm $g write_bw --bind $C -s 8 -D $D --json $S"
run[write_bw_8]="$udp $g write_bw --bind $S --json -- $udp $g write_bw --bind $C -s 8 -D $D --json $S"
run[shm_write_bw_8_busy]="$shm $g write_bw --bind $S --json --busy-poll -- $shm $g write_bw --bind $C -s 8 -D $D --json --busy-poll $S"
run[write_bw_8_busy]="$udp $g write_bw --bind $S --json --busy-poll -- $udp $g write_bw --bind $C -s 8 -D $D --json --busy-poll $S"
run[tcp_lat_busy_8]="$n tcp_lat --bind $S -s 8 --busy-poll -- $n tcp_lat --bind $C -s 8 -n $N --busy-poll $S"
run[tcp_bw]="$n tcp_bw --bind $S -- $n tcp_bw --bind $C -s 65536 -D $D $S"
run[udp_rate]="$n udp_rate --bind $S -- $n udp_rate --bind $C -s 8 -D $D $S"
order=(shm_send_lat_busy shm_lat send_lat_busy shm_send_lat_ev unix_lat send_lat_ev shm_write_bw write_bw
  shm_write_bw_8 write_bw_8 shm_write_bw_8_busy write_bw_8_busy udp_rate tcp_lat_busy_8 tcp_bw)
# The rounds, then each pair once more under perf stat (bench/lib.sh's run_pairs; COUNT=0
# skips that): the rings' figures beside the system calls per message they save, which a
# machine prices (docs/guide/same-host.md, "Figures").
run_pairs

echo "Two processes on one host, $R interleaved rounds. Reproduce: \`$repro\`"
echo
"$bin/report" -dir "$out"
write_page "$out"
echo "reproduce with: $repro" >&2
report_failures
