#!/usr/bin/env bash
# bench/rspreload.sh: unmodified socket programs on RDMA (issue 30). Debian's iperf3 and
# sockperf under librspreload.so (librdmacm1's LD_PRELOAD shim) on goverbs' drop-in
# librdmacm.so.1 (the C flavour, capi/build.sh -attach: rsockets in capi/rdmacm/rsocket.c,
# both devices in one `goverbs serve`), against the same programs on the kernel's TCP,
# two processes on loopback, in interleaved rounds:
#   - stream: iperf3 for DURATION seconds with its default 128 KiB writes, as a user runs
#     it, the receiver's Gb/s;
#   - request/response: sockperf ping-pong --tcp -m 64 for DURATION seconds, its average
#     one-way latency (sockperf halves the round trip), µs.
# Odd rounds run the kernel's TCP first, even rounds rsockets first.
# The rows (rstream.json, as bench/rstream.sh writes them, mode "preload") and meta.json
# go to OUT (default docs/perf/rspreload); with the default OUT the run regenerates
# docs/PERFORMANCE.md. bench/report prints the table: each round's ratio to the kernel's
# TCP and their median. Around each iperf3 run bench/xcore measures how fast the machine
# moves data between its cores just then (xcore_gbps, before and after): on a VM that
# rate has phases 4-5x apart lasting seconds, and a round whose two runs met different
# phases compares the machine with itself, not rsockets with TCP. The report gives the
# median over the rounds whose four probes all saw the same phase beside the median
# over all.
#
#   bench/rspreload.sh                      # ROUNDS=3 DURATION=3
#
# Needs gcc, rdma-core's headers (libibverbs-dev, librdmacm-dev), rdmacm-utils (for
# librspreload.so), iperf3 and sockperf. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
dur=${DURATION:-3}
out=${OUT:-docs/perf/rspreload}
repro="ROUNDS=$rounds DURATION=$dur${OUT:+ OUT=$OUT} bench/rspreload.sh"
pre=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
for p in iperf3 sockperf; do
	command -v $p >/dev/null || { echo "rspreload.sh: $p is not installed" >&2; exit 1; }
done
[ -e "$pre" ] || { echo "rspreload.sh: $pre missing (apt-get install rdmacm-utils, or RSPRELOAD=path)" >&2; exit 1; }
. bench/lib.sh
. bench/meta.sh

# The daemon both devices live in; lib.sh's cleanup stops it (and a running server,
# srv_pid) and removes $bin.
serve=
stop_serve() { [ -z "$serve" ] || { kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null; } || true; }
cleanup_hooks+=(stop_serve)
S=127.52.0.2 C=127.52.0.3
bash capi/build.sh -attach "$bin/lib" >/dev/null
go build -o "$bin/report" ./bench/report
go build -o "$bin/xcore" ./bench/xcore
mkdir -m 700 "$bin/run"
export XDG_RUNTIME_DIR=$bin/run
"$bin/lib/goverbs" serve "s0=$S,c0=$C" >"$bin/serve.log" 2>&1 &
serve=$!
sleep 1
rs_s="env LD_LIBRARY_PATH=$bin/lib LD_PRELOAD=$pre GOVERBS_DEVICES=s0=$S"
rs_c="env LD_LIBRARY_PATH=$bin/lib LD_PRELOAD=$pre GOVERBS_DEVICES=c0=$C"

# The run's description first: git describe must see the tree before the last run's
# committed rows are removed, or every run would call its commit dirty.
write_meta "$out" "$repro"
rm -f "$out/rstream.json" "$out/log.txt"
echo "$repro" >&2

# row ROUND VARIANT GBPS US XCORE_BEFORE XCORE_AFTER: one rstream.json row (bench/report's rstreamRow).
row() { echo "{$(probe_json xcore_gbps "$5" "$6")\"round\":$1,\"mode\":\"preload\",\"variant\":\"$2\",\"bw_gbps\":$3,\"rr_us\":$4}" >>"$out/rstream.json"; }

# iperf ENVPREFIX: the receiver's Gb/s of one iperf3 run (server and client under the prefix).
iperf() {
	local pfx_s=$1 pfx_c=$2 o
	$pfx_s iperf3 -s -B $S -1 >>"$out/log.txt" 2>&1 &
	srv_pid=$!
	sleep 0.5
	o=$($pfx_c iperf3 -c $S -B $C -t "$dur" 2>>"$out/log.txt")
	echo "$o" >>"$out/log.txt"
	wait "$srv_pid" || true
	srv_pid=
	echo "$o" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i ~ /bits\/sec$/) { v = $(i-1); u = $i } }
		END { if (u == "") exit 1; if (u ~ /^G/) print v; else if (u ~ /^M/) print v / 1000; else if (u ~ /^K/) print v / 1e6; else print v / 1e9 }'
}

# pingpong SERVER-PREFIX CLIENT-PREFIX: sockperf's average one-way latency, µs.
pingpong() {
	local pfx_s=$1 pfx_c=$2 o
	$pfx_s sockperf server -i $S --tcp >>"$out/log.txt" 2>&1 &
	srv_pid=$!
	sleep 1
	o=$($pfx_c sockperf ping-pong -i $S --tcp -m 64 -t "$dur" 2>&1)
	echo "$o" >>"$out/log.txt"
	kill "$srv_pid" 2>/dev/null || true
	wait "$srv_pid" 2>/dev/null || true
	srv_pid=
	echo "$o" | awk '/Summary: Latency is/ { for (i = 1; i <= NF; i++) if ($i == "is") print $(i+1); found = 1 } END { if (!found) exit 1 }'
}

# The two variants' environment prefixes, server and client: the kernel's TCP runs the
# programs as they are.
declare -A pre_s=([tcp]=env [rsockets]="$rs_s") pre_c=([tcp]=env [rsockets]="$rs_c")
# Odd rounds run the kernel's TCP first, even rounds rsockets first: whatever runs second
# in a round gains from it (bench/rstream.sh's order says how much), and a script that
# always ran TCP first (until 2026-11-28) handed that to rsockets in every round.
declare -A bw lat probes
for r in $(seq "$rounds"); do
	echo "== round $r" >&2
	vs=(tcp rsockets)
	[ $((r % 2)) = 1 ] || vs=(rsockets tcp)
	x0=$(probe "$bin/xcore")
	bw[${vs[0]}]=$(iperf "${pre_s[${vs[0]}]}" "${pre_c[${vs[0]}]}")
	x1=$(probe "$bin/xcore")
	bw[${vs[1]}]=$(iperf "${pre_s[${vs[1]}]}" "${pre_c[${vs[1]}]}")
	x2=$(probe "$bin/xcore")
	probes[${vs[0]}]="$x0 $x1" probes[${vs[1]}]="$x1 $x2"
	for v in "${vs[@]}"; do lat[$v]=$(pingpong "${pre_s[$v]}" "${pre_c[$v]}"); done
	echo "   iperf3 Gb/s: tcp ${bw[tcp]} rsockets ${bw[rsockets]} (xcore GB/s $x0 $x1 $x2) | sockperf µs: tcp ${lat[tcp]} rsockets ${lat[rsockets]}" >&2
	for v in tcp rsockets; do
		# shellcheck disable=SC2086 # two probes, as two words
		row "$r" "$v" "${bw[$v]}" "${lat[$v]}" ${probes[$v]}
	done
done

echo "Reproduce: \`$repro\`"
echo
"$bin/report" -rstream "$out"
write_page "$out"
