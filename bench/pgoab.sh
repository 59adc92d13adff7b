#!/usr/bin/env bash
# bench/pgoab.sh: the goverbs command built with its profile (cmd/goverbs/default.pgo,
# bench/pgo.sh) against the same tree built without (-pgo=off), in interleaved rounds
# (the order alternating), two processes on loopback addresses: what profile-guided
# optimization buys on each path, measured in one run so that the machine's mood is the
# same for both.
#
#   ROUNDS=6 bench/pgoab.sh
#
# Per round and build: through the same-host rings (GOVERBS_SHM=1) RC WRITE 64 KiB and
# 8 B (`write_bw -D $DURATION`, default and --busy-poll), 8 B SEND one-way busy-poll and
# blocked on the completion channel (`send_lat -n $ITERS`); over UDP (GOVERBS_SHM=0) the
# 64 KiB WRITE and the busy-poll one-way; rdmanet's 64 KiB stream and 64 B
# request/response (`rstream`, rings). It prints every run, then per measurement each
# round's pgo ÷ nopgo and their median (bandwidth and rate: above 1 is better; latency
# and request/response time: below 1 is better).
# Environment: ROUNDS=6, DURATION=3, ITERS=20000. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/ab.sh
R=${ROUNDS:-6} D=${DURATION:-3} N=${ITERS:-20000}
S=127.54.0.2 C=127.54.0.3
work=$(mktemp -d)
srv=
cleanup() {
	[ -n "$srv" ] && { kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
[ -f cmd/goverbs/default.pgo ] || { echo "bench/pgoab.sh: no cmd/goverbs/default.pgo (bench/pgo.sh makes it)" >&2; exit 1; }
go build -pgo=off -o "$work/nopgo" ./cmd/goverbs
go build -pgo=auto -o "$work/pgo" ./cmd/goverbs
names=(nopgo pgo)
mkdir -m 700 "$work/run"
export XDG_RUNTIME_DIR=$work/run

# rs BIN FIELD ARGS...: one rstream pair through the rings; prints the client's FIELD-th
# column (7: Gb/s, NF: the average request/response µs).
rs() {
	local b=$1 field=$2
	shift 2
	GOVERBS_SHM=1 "$b" rstream -b $S "$@" >/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	GOVERBS_SHM=1 "$b" rstream -b $C -s $S "$@" 2>/dev/null | sed -n 2p | awk -v f="$field" '{print (f == "NF") ? $NF : $f}'
	wait "$srv" || true
	srv=
}

rows=$work/rows
for r in $(seq "$R"); do
	for v in $(ab_order "$r"); do
		b=$work/$v
		echo "$r $v bw64k $(GOVERBS_SHM=1 ab_perf "$b" bw write_bw -- write_bw -s 65536 -D "$D")" | tee -a "$rows"
		echo "$r $v rate8 $(GOVERBS_SHM=1 ab_perf "$b" rate write_bw -- write_bw -s 8 -D "$D")" | tee -a "$rows"
		echo "$r $v rate8_busy $(GOVERBS_SHM=1 ab_perf "$b" rate write_bw --busy-poll -- write_bw -s 8 -D "$D" --busy-poll)" | tee -a "$rows"
		echo "$r $v lat_busy $(GOVERBS_SHM=1 ab_perf "$b" lat send_lat -s 8 -n "$N" --busy-poll -- send_lat -s 8 -n "$N" --busy-poll)" | tee -a "$rows"
		echo "$r $v lat_e $(GOVERBS_SHM=1 ab_perf "$b" lat send_lat -s 8 -n "$N" -e -- send_lat -s 8 -n "$N" -e)" | tee -a "$rows"
		echo "$r $v udp_bw64k $(GOVERBS_SHM=0 ab_perf "$b" bw write_bw -- write_bw -s 65536 -D "$D")" | tee -a "$rows"
		echo "$r $v udp_lat_busy $(GOVERBS_SHM=0 ab_perf "$b" lat send_lat -s 8 -n "$N" --busy-poll -- send_lat -s 8 -n "$N" --busy-poll)" | tee -a "$rows"
		echo "$r $v rs_stream $(rs "$b" 7 -S 65536 -C 4000 -I 1)" | tee -a "$rows"
		echo "$r $v rs_rr $(rs "$b" NF -S 64 -C 1 -I 20000)" | tee -a "$rows"
	done
done

echo
echo "pgo ÷ nopgo, $R interleaved rounds. Reproduce: \`ROUNDS=$R DURATION=$D ITERS=$N bench/pgoab.sh\`"
ab_medians "$rows" nopgo pgo bw64k rate8 rate8_busy lat_busy lat_e udp_bw64k udp_lat_busy rs_stream rs_rr
