#!/usr/bin/env bash
# A process attached to a goverbs serve daemon against the in-process device (issue 27's
# figures), two processes on loopback: busy-poll 8 B send_lat (one-way, median; the bar is
# ≤ 1.2× the in-process device's), default-mode 8 B send_lat, and RC WRITE 64 KiB
# bandwidth (the bar is ≥ 0.9×). Each is run twice attached: through the daemon's engine
# (GOVERBS_ATTACH_ENGINE=0, the attach_ rows) and with each process running its own engine
# on the daemon's address (GOVERBS_ATTACH_ENGINE=1, the attach_own_ rows). Every attached
# figure's in-process baseline is measured in the same round; rounds are interleaved.
#
#   bench/attach.sh [OUTDIR]          (default: bench/results-attach)
#
# Environment: ROUNDS=3, DURATION=3 (seconds per bandwidth run), ITERS=20000 (round trips
# per latency run), OWN=0 (leave out the attach_own_ rows), SPIN (the daemon's --spin,
# default 0), DAEMON_SHM=1 (the daemon alone
# runs with GOVERBS_SHM=1: its two devices pass datagrams through the same-host rings
# instead of the kernel's UDP; the in-process pairs stay on UDP: GOVERBS_SHM=0 is set
# for them, since in-process devices of two processes meet through the rings by default).
#
# The in-process pairs bind 127.51.0.2 (server) and 127.51.0.3 (client); the daemon serves
# 127.51.0.4 and 127.51.0.5, and the attached pairs bind those with GOVERBS_ATTACH=1. The
# daemon's runtime directory is private to the run. Nothing leaves the machine. The rows
# are bench/compare.sh's (report -dir OUTDIR shows them beside their baselines).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results-attach}
R=${ROUNDS:-3} D=${DURATION:-3} N=${ITERS:-20000} SPIN=${SPIN:-0} DSHM=${DAEMON_SHM:-0} OWN=${OWN:-1}
repro="ROUNDS=$R DURATION=$D ITERS=$N OWN=$OWN SPIN=$SPIN DAEMON_SHM=$DSHM bench/attach.sh $out"
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

S=127.51.0.2 C=127.51.0.3 AS=127.51.0.4 AC=127.51.0.5
run_dir=$(mktemp -d)
chmod 700 "$run_dir"
export XDG_RUNTIME_DIR=$run_dir
GOVERBS_SHM=$DSHM "$g" serve --spin "$SPIN" "sw0=$AS,sw1=$AC" >>"$out/log.txt" 2>&1 &
daemon_pid=$!
stop_daemon() {
  kill "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  rm -rf "$run_dir"
}
cleanup_hooks+=(stop_daemon)
sleep 0.5
kill -0 "$daemon_pid" || { echo "attach.sh: goverbs serve did not start (see $out/log.txt)" >&2; exit 1; }
u=(env GOVERBS_SHM=0) # the in-process baseline on the kernel's UDP, as the attached rows
a=(env GOVERBS_ATTACH=1 GOVERBS_ATTACH_ENGINE=0)
o=(env GOVERBS_ATTACH=1 GOVERBS_ATTACH_ENGINE=1)
own() { [ "$OWN" = 1 ]; }

# Odd rounds run the in-process device first, even rounds backwards (lib.sh run_queued).
for round in $(seq "$R"); do
  queue send_lat_busy "${u[@]}" $g send_lat --bind $S -s 8 -n $N --json --busy-poll -- \
    "${u[@]}" $g send_lat --bind $C -s 8 -n $N --json --busy-poll $S
  queue attach_send_lat_busy "${a[@]}" $g send_lat --bind $AS -s 8 -n $N --json --busy-poll -- \
    "${a[@]}" $g send_lat --bind $AC -s 8 -n $N --json --busy-poll $AS
  own && queue attach_own_send_lat_busy "${o[@]}" $g send_lat --bind $AS -s 8 -n $N --json --busy-poll -- \
    "${o[@]}" $g send_lat --bind $AC -s 8 -n $N --json --busy-poll $AS
  queue send_lat "${u[@]}" $g send_lat --bind $S -s 8 -n $N --json -- "${u[@]}" $g send_lat --bind $C -s 8 -n $N --json $S
  queue attach_send_lat "${a[@]}" $g send_lat --bind $AS -s 8 -n $N --json -- \
    "${a[@]}" $g send_lat --bind $AC -s 8 -n $N --json $AS
  own && queue attach_own_send_lat "${o[@]}" $g send_lat --bind $AS -s 8 -n $N --json -- \
    "${o[@]}" $g send_lat --bind $AC -s 8 -n $N --json $AS
  queue write_bw "${u[@]}" $g write_bw --bind $S --json -- "${u[@]}" $g write_bw --bind $C -s 65536 -D $D --json $S
  queue attach_write_bw "${a[@]}" $g write_bw --bind $AS --json -- \
    "${a[@]}" $g write_bw --bind $AC -s 65536 -D $D --json $AS
  own && queue attach_own_write_bw "${o[@]}" $g write_bw --bind $AS --json -- \
    "${o[@]}" $g write_bw --bind $AC -s 65536 -D $D --json $AS
  run_queued "$round"
done

echo "Two processes on loopback, attached to goverbs serve against the in-process device, $R interleaved rounds. Reproduce: \`$repro\`"
echo
"$bin/report" -dir "$out"
echo "reproduce with: $repro" >&2
report_failures
