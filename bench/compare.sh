#!/usr/bin/env bash
# Benchmark goverbs against the Go standard library's sockets as a Go programmer would use
# them (bench/nettest: net.UDPConn ping-pong, net.TCPConn stream, plain UDP send loop;
# nothing of goverbs' own), two processes per test on loopback, every figure next to its
# baseline measured in the same round, and a bandwidth/size sweep plot.
#
#   bench/compare.sh [OUTDIR]        (default: docs/perf/loopback)
#
# The JSON rows, the run's description (meta.json: command, date, commit, machine) and the
# plot go to OUTDIR; with the default OUTDIR the run then regenerates docs/PERFORMANCE.md
# from everything under docs/perf (bench/report -page), so commit the rows with the page.
#
# Environment:
#   ROUNDS=3     rounds; each runs every test and baseline once, interleaved, so a slow
#                spell of this shared machine slows a test and its baseline alike. The
#                table gives medians, each round's ratio and the median of those ratios.
#   DURATION=3   seconds per bandwidth and message-rate run
#   ITERS=20000  round trips per latency run
#   SWEEP=1      0 skips the size sweep (goverbs write_bw -a against Go TCP) and its plot
#   ONLY=lat     only the latency pairs (UDP ping-pongs against SEND and WRITE, default
#                and busy-poll), no sweep: for work on latency
#
# Tests per round: Go TCP stream vs RC WRITE, SEND, READ 64 KiB; Go UDP 8 B datagram rate
# vs RC WRITE 8 B message rate, default and busy-poll; Go UDP 8 B ping-pong vs RC SEND and
# WRITE 8 B latency, default (netpoller; SEND also blocked on its completion channel, -e)
# and busy-poll (spinning) modes, and busy-poll SEND against the same spinning ping-pong
# sending an RC ping-pong's datagrams (nettest --rc-wire: the kernel's floor); Go TCP
# 64 B request/response, both modes, as a baseline of its own.
#
# Uses only Go and this repository. Each side binds its own loopback address
# (127.50.0.2 serves, 127.50.0.3 is the client); nothing leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# RoCEv2 over the kernel's UDP path, as between hosts: the same-host shortcut (shared
# memory between goverbs processes on one host) has its own comparison, bench/samehost.sh.
export GOVERBS_SHM=0
out=${1:-docs/perf/loopback}
R=${ROUNDS:-3} D=${DURATION:-3} N=${ITERS:-20000} SWEEP=${SWEEP:-1} ONLY=${ONLY:-}
[ "$ONLY" = lat ] && SWEEP=0
S=127.50.0.2 C=127.50.0.3
repro="ROUNDS=$R DURATION=$D ITERS=$N SWEEP=$SWEEP${ONLY:+ ONLY=$ONLY} bench/compare.sh $out"
. bench/lib.sh
. bench/meta.sh
# The run's description first: git describe must see the tree before the last run's
# committed rows are removed, or every run would call its commit dirty.
write_meta "$bin" "$repro"
mkdir -p "$out"
rm -f "$out"/*.json "$out/log.txt" "$out/bandwidth.svg"
mv "$bin/meta.json" "$out/meta.json"
build
echo "$repro" >&2

# skip_lat runs a pair that is not a latency pair, unless ONLY=lat.
skip_lat() { [ "$ONLY" != lat ] || return 0; "$@"; }

# round_pairs queues one round's pairs (lib.sh's queue; run_queued runs them forwards in
# odd rounds and backwards in even ones): here each baseline comes before the goverbs
# runs it is compared with.
round_pairs() {
  skip_lat queue tcp_bw   $n tcp_bw --bind $S -- $n tcp_bw --bind $C -s 65536 -D $D $S
  for t in write_bw send_bw read_bw; do
    skip_lat queue $t     $g $t --bind $S --json -- $g $t --bind $C -s 65536 -D $D --json $S
  done
  skip_lat queue udp_rate         $n udp_rate --bind $S -- $n udp_rate --bind $C -s 8 -D $D $S
  skip_lat queue write_bw_8       $g write_bw --bind $S --json -- $g write_bw --bind $C -s 8 -D $D --json $S
  skip_lat queue write_bw_8_busy  $g write_bw --bind $S --json --busy-poll -- $g write_bw --bind $C -s 8 -D $D --json --busy-poll $S
  queue udp_lat          $n udp_lat --bind $S -- $n udp_lat --bind $C -s 8 -n $N $S
  for t in send_lat write_lat; do
    queue $t     $g $t --bind $S -s 8 -n $N --json -- $g $t --bind $C -s 8 -n $N --json $S
  done
  # Blocked on the completion channel, as the UDP baseline's reader is blocked in Read.
  queue send_lat_ev  $g send_lat --bind $S -s 8 -n $N --json -e -- $g send_lat --bind $C -s 8 -n $N --json -e $S
  queue udp_lat_busy     $n udp_lat --bind $S --busy-poll -- $n udp_lat --bind $C -s 8 -n $N --busy-poll $S
  # The same spinning ping-pong with an RC ping-pong's datagrams (unconnected, DF, an
  # ACK-sized datagram behind each message): the kernel's share of the row above it.
  queue udp_lat_rcwire   $n udp_lat --bind $S --busy-poll --rc-wire -- $n udp_lat --bind $C -s 8 -n $N --busy-poll --rc-wire $S
  for t in send_lat write_lat; do
    queue ${t}_busy  $g $t --bind $S -s 8 -n $N --json --busy-poll -- $g $t --bind $C -s 8 -n $N --json --busy-poll $S
  done
  skip_lat queue tcp_lat          $n tcp_lat --bind $S -- $n tcp_lat --bind $C -s 64 -n $N $S
  skip_lat queue tcp_lat_busy     $n tcp_lat --bind $S --busy-poll -- $n tcp_lat --bind $C -s 64 -n $N --busy-poll $S
}
for round in $(seq "$R"); do
  round_pairs
  run_queued "$round"
done

svg=()
if [ "$SWEEP" != 0 ]; then
  # goverbs write_bw -a against a Go TCP stream at the same sizes.
  pair sweep_goverbs_write_bw 1 $g write_bw --bind $S -a --json -- $g write_bw --bind $C -a -n 1000 --json $S
  for s in 2 8 32 128 512 2048 8192 32768 131072 524288 2097152 8388608; do
    pair sweep_go_tcp 1 $n tcp_bw --bind $S -- $n tcp_bw --bind $C -s $s -D 1 $S
  done
  svg=(-svg "$out/bandwidth.svg")
fi

echo "Two processes on loopback, $R interleaved rounds. Reproduce: \`$repro\`"
echo
"$bin/report" -dir "$out" "${svg[@]}"
write_page "$out"
echo "reproduce with: $repro" >&2
report_failures
