#!/usr/bin/env bash
# bench/daemonab.sh OLD NEW: the C drop-in at two revisions (by default two devices of one
# `goverbs serve`, FLAVOUR=attach; FLAVOUR=inprocess below), in
# interleaved rounds (the order alternating), with unmodified C programs as its clients:
# what a change did to the daemon's path between its devices (the same-host rings inside
# one process, docs/guide/same-host.md), measured in one run so that the machine's mood
# is the same for both. bench/samehostab.sh does the same for two Go processes.
#
#   ROUNDS=6 bench/daemonab.sh 688b194 HEAD
#
# Each revision is built as the C flavour of the drop-in (capi/build.sh -attach: the
# daemon and libibverbs.so.1/librdmacm.so.1 that talk to it). Per round and revision,
# the daemon serving s0 on 127.52.0.2 and c0 on 127.52.0.3:
#   - wb64k: Debian's ib_write_bw -s 65536 -D $DURATION between a client on each device,
#     MB/s;
#   - wb8: the same at 8 bytes, its message rate in Mpps;
#   - iperf3: iperf3 -t $DURATION under librspreload.so, the receiver's Gb/s.
# FLAVOUR=inprocess builds the in-process drop-in instead (capi/build.sh: the engine in
# each C program, no daemon), for a change to the Go side of the C ABI (capi/*.go), with
# two devices s0 and c0 in two programs, through the same-host rings; it adds
#   - lat: Debian's ib_send_lat -s 8 -n $ITERS, its typical one-way µs (below 1 is
#     better).
# It prints every run, then per measurement each round's NEW ÷ OLD and their median
# (above 1 is better, but for lat). Environment: ROUNDS=6, DURATION=3, ITERS=20000,
# FLAVOUR (attach; inprocess), RSPRELOAD (librspreload.so's
# path). Needs gcc, rdma-core's headers, perftest, rdmacm-utils and iperf3 (.ci/run
# installs them); a measurement whose program is missing is left out. Run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/ab.sh
[ $# -eq 2 ] || { echo "usage: bench/daemonab.sh OLD NEW" >&2; exit 2; }
R=${ROUNDS:-6} D=${DURATION:-3} N=${ITERS:-20000} FLAVOUR=${FLAVOUR:-attach}
pre=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
S=127.52.0.2 C=127.52.0.3
work=$(mktemp -d)
serve= srv=
stop() {
	[ -n "$srv" ] && { kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
	[ -n "$serve" ] && { kill "$serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; }
	srv= serve=
}
cleanup() {
	stop
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
case $FLAVOUR in
attach) capi_build() { bash capi/build.sh -attach "$1" >/dev/null; } ;;
inprocess) capi_build() { bash capi/build.sh "$1" >/dev/null; } ;;
*) echo "daemonab.sh: FLAVOUR is attach or inprocess" >&2; exit 2 ;;
esac
ab_build "$work" capi_build "$@"
ms=()
[ "$FLAVOUR" = inprocess ] && command -v ib_send_lat >/dev/null && ms+=(lat)
command -v ib_write_bw >/dev/null && ms+=(wb64k wb8)
[ "$FLAVOUR" = attach ] && command -v iperf3 >/dev/null && [ -e "$pre" ] && ms+=(iperf3)
[ ${#ms[@]} -gt 0 ] || { echo "daemonab.sh: neither ib_write_bw nor iperf3 with librspreload here" >&2; exit 1; }

# measure LIB WHAT: one run of WHAT between the two devices (the daemon's, with LIB's
# daemon; or each program's own), with LIB's libraries; prints its figure (nothing if it
# failed).
measure() {
	local lib=$1 what=$2
	mkdir -m 700 -p "$work/run"
	if [ "$FLAVOUR" = attach ]; then
		XDG_RUNTIME_DIR=$work/run "$lib/goverbs" serve "s0=$S,c0=$C" >>"$work/serve.log" 2>&1 &
		serve=$!
		sleep 1
	fi
	local s=(env XDG_RUNTIME_DIR="$work/run" LD_LIBRARY_PATH="$lib" GOVERBS_DEVICES=s0=$S)
	local c=(env XDG_RUNTIME_DIR="$work/run" LD_LIBRARY_PATH="$lib" GOVERBS_DEVICES=c0=$C)
	case $what in
	lat)
		"${s[@]}" ib_send_lat -d s0 -x 0 -s 8 -n "$N" >/dev/null 2>&1 &
		srv=$!
		sleep 0.5
		"${c[@]}" ib_send_lat -d c0 -x 0 -s 8 -n "$N" $S 2>/dev/null |
			awk '$1 == 8 && NF >= 5 { print $5 }' || true
		;;
	wb64k | wb8)
		local size=65536 col=4
		[ "$what" = wb8 ] && size=8 col=5
		"${s[@]}" ib_write_bw -d s0 -x 0 -s $size -D "$D" -F >/dev/null 2>&1 &
		srv=$!
		sleep 0.5
		"${c[@]}" ib_write_bw -d c0 -x 0 -s $size -D "$D" -F $S 2>/dev/null |
			awk -v col=$col '$1 ~ /^[0-9]+$/ && NF >= 5 { print $col }' || true
		;;
	iperf3)
		"${s[@]}" LD_PRELOAD="$pre" iperf3 -s -B $S -1 >/dev/null 2>&1 &
		srv=$!
		sleep 0.5
		"${c[@]}" LD_PRELOAD="$pre" iperf3 -c $S -B $C -t "$D" 2>/dev/null |
			awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i ~ /bits\/sec$/) { v = $(i-1); u = $i } }
			END { if (u ~ /^G/) print v; else if (u ~ /^M/) print v / 1000 }' || true
		;;
	esac
	wait "$srv" 2>/dev/null || true
	srv=
	stop
	rm -rf "$work/run"
}

rows=$work/rows
for r in $(seq "$R"); do
	for v in $(ab_order "$r"); do
		for m in "${ms[@]}"; do
			echo "$r $v $m $(measure "$work/$v" "$m")" | tee -a "$rows"
		done
	done
done

echo
echo "${names[1]} ÷ ${names[0]}, $R interleaved rounds. Reproduce: \`FLAVOUR=$FLAVOUR ROUNDS=$R DURATION=$D ITERS=$N bench/daemonab.sh $*\`"
ab_medians "$rows" "${names[0]}" "${names[1]}" "${ms[@]}"
