#!/usr/bin/env bash
# bench/instr.sh REV...: the instructions one iteration of an in-process benchmark
# executes, at each revision, counted by valgrind's cachegrind: a figure that does not
# depend on the machine's mood. On the 2-core VMs the wall time of one binary's rounds
# swings 2x (the cross-core phases, DESIGN.md, "What still depends on the machine"), so a
# change of a few per cent to the engine's per-message work cannot be seen in time
# without dozens of rounds; its instruction count moves by exactly what it removed.
#
#   bench/instr.sh 4766f8e HEAD
#   BENCH=BenchmarkRCWrite8RateInMemory bench/instr.sh HEAD
#
# Instructions are not time: a change that trades instructions for a cache miss, a
# locked instruction or a store-forwarding stall looks better here than it is. Use it to
# see what a change removed, then confirm the time with the A/B scripts (inproc.sh,
# samehostab.sh).
#
# Per revision: the package's test binary is run under cachegrind at two iteration
# counts (-test.benchtime Nx, ITERS and 3*ITERS) and the difference divided by the
# iterations between them, so the set-up and the runtime's start cancel out. GOGC=off:
# a collection started by the set-up's garbage would otherwise run its marking and write
# barriers under the benchmark (on a program slowed 50x by valgrind, most of its
# instructions). -test.cpu 1: one P, no work stolen between threads. The top functions by
# instructions per iteration follow (TOP=20; cg_annotate's attribution, inlined code
# counted in the function it was inlined into).
#
# Environment: BENCH (default BenchmarkRCSendPingPong8InMemory), PKG (./verbs), ITERS
# (10000), TOP (20), GOVERBS_SHM (0: the UDP path's engine work through netiotest's pipe,
# as bench/inproc.sh), CACHE (1: simulate a 32 KiB 8-way L1i and L1d, Zen 3's, and print
# the L1i and L1d misses per iteration beside the instructions; bench/icache.sh does the
# same for one process of a two-process busy-poll round trip). Needs valgrind
# (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: bench/instr.sh REV..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench/instr.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bench=${BENCH:-BenchmarkRCSendPingPong8InMemory}
pkg=${PKG:-./verbs}
iters=${ITERS:-10000}
top=${TOP:-20}
export GOVERBS_SHM=${GOVERBS_SHM:-0} GOGC=off

revs=()
for r in "$@"; do revs+=("$(git rev-parse --verify "$r^{commit}")"); done
work=$(mktemp -d)
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/src" "${revs[0]}"

# count N: the instructions of one run of the test binary with N iterations; its
# cachegrind file stays as $work/cg-N.out.
. bench/cachegrind.sh
sim=(--cache-sim=no)
[ "${CACHE:-0}" = 1 ] && sim=("${cg_sim[@]}")
count() {
	valgrind --tool=cachegrind "${sim[@]}" --cachegrind-out-file="$work/cg-$1.out" \
		"$work/b.test" -test.run '^$' -test.bench "^$bench\$" -test.benchtime "$1x" -test.cpu 1 \
		2>"$work/cg-$1.err" >/dev/null
	cg_total "$work/cg-$1.err" "I   refs"
}
# misses N WHAT: the run's total WHAT ("I1  misses", "D1  misses"), with CACHE=1.
misses() { cg_total "$work/cg-$1.err" "$2"; }

printf '%-12s %s\n' revision "instructions per iteration of $bench"
for rev in "${revs[@]}"; do
	git -C "$work/src" checkout -q --detach "$rev"
	(cd "$work/src" && go test -c -o "$work/b.test" "$pkg")
	# Benchmarks find their testdata relative to the package directory.
	cd "$work/src/$pkg"
	a=$(count "$iters")
	b=$(count $((3 * iters)))
	cd - >/dev/null
	short=$(git rev-parse --short "$rev")
	if [ "${CACHE:-0}" = 1 ]; then
		awk -v a="$a" -v b="$b" -v n=$((2 * iters)) -v r="$short" \
			-v i0="$(misses "$iters" "I1  misses")" -v i1="$(misses $((3 * iters)) "I1  misses")" \
			-v d0="$(misses "$iters" "D1  misses")" -v d1="$(misses $((3 * iters)) "D1  misses")" \
			'BEGIN { printf "%-12s %.0f  (L1i misses %.0f, L1d misses %.0f)\n", r, (b - a) / n, (i1 - i0) / n, (d1 - d0) / n }'
	else
		awk -v a="$a" -v b="$b" -v n=$((2 * iters)) -v r="$short" 'BEGIN { printf "%-12s %.0f\n", r, (b - a) / n }'
	fi
	cg_diff "$work/cg-$iters.out" "$work/cg-$((3 * iters)).out" >"$work/diff-$short.out" 2>/dev/null
	cg_annotate --show-percs=no "$work/diff-$short.out" 2>/dev/null |
		awk -v n=$((2 * iters)) -v top="$top" '
			/^-+$/ { dash++ }
			dash >= 4 && $1 ~ /^[0-9,]+$/ && NF >= 2 && shown < top {
				v = $1; gsub(",", "", v)
				f = $NF; sub(/.*:/, "", f); sub(/^github\.com\/goverbs\/goverbs\//, "", f)
				printf "    %8.0f  %s\n", v / n, f; shown++
			}'
done
