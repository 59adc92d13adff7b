#!/usr/bin/env bash
# bench/samehostab.sh OLD NEW: the same-host shortcut at two revisions, in interleaved
# rounds (the order alternating), two goverbs processes on loopback addresses talking
# through the shared-memory rings: what a change to the rings' path did, measured in one
# run so that the machine's mood is the same for both. bench/samehost.sh measures one
# tree against its baselines (the UDP path, Go's unix socket) for the performance page.
#
#   ROUNDS=6 bench/samehostab.sh fde4330 HEAD
#
# Per round and revision: RC WRITE 64 KiB and 8 B (`write_bw -D $DURATION`), 8 B SEND
# one-way busy-poll and blocked on the completion channel (`send_lat -n $ITERS
# --busy-poll`, `-e`). It prints every run, then per measurement each round's NEW ÷ OLD
# and their median (bandwidth and rate: above 1 is better; latency: below 1 is better).
# Environment: ROUNDS=6, DURATION=3, ITERS=20000. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/ab.sh
[ $# -eq 2 ] || { echo "usage: bench/samehostab.sh OLD NEW" >&2; exit 2; }
R=${ROUNDS:-6} D=${DURATION:-3} N=${ITERS:-20000}
S=127.51.0.2 C=127.51.0.3
work=$(mktemp -d)
srv=
cleanup() {
	[ -n "$srv" ] && { kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
go_build() { go build -o "$1" ./cmd/goverbs; }
ab_build "$work" go_build "$@"
export GOVERBS_SHM=1

rows=$work/rows
for r in $(seq "$R"); do
	for v in $(ab_order "$r"); do
		b=$work/$v
		echo "$r $v bw64k $(ab_perf "$b" bw write_bw -- write_bw -s 65536 -D "$D")" | tee -a "$rows"
		echo "$r $v rate8 $(ab_perf "$b" rate write_bw -- write_bw -s 8 -D "$D")" | tee -a "$rows"
		echo "$r $v lat_busy $(ab_perf "$b" lat send_lat -s 8 -n "$N" --busy-poll -- send_lat -s 8 -n "$N" --busy-poll)" | tee -a "$rows"
		echo "$r $v lat_e $(ab_perf "$b" lat send_lat -s 8 -n "$N" -e -- send_lat -s 8 -n "$N" -e)" | tee -a "$rows"
	done
done

echo
echo "${names[1]} ÷ ${names[0]}, $R interleaved rounds. Reproduce: \`ROUNDS=$R DURATION=$D ITERS=$N bench/samehostab.sh $*\`"
ab_medians "$rows" "${names[0]}" "${names[1]}" bw64k rate8 lat_busy lat_e
