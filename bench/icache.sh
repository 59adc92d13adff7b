#!/usr/bin/env bash
# bench/icache.sh [REV...]: how much code one process runs per busy-poll round trip, and
# how often it misses the instruction cache doing it (DESIGN.md, "The instruction cache,
# and the profile-guided build"). For each revision (default: the working tree), a busy
# 8 B `goverbs send_lat` through the same-host rings: the server runs natively, the client
# under valgrind's cachegrind with a 32 KiB 8-way L1i and L1d (Zen 3's, and most x86
# cores') and a 512 KiB L2, at two iteration counts, whose difference divided by the
# iterations between them is one round trip's: instructions, L1i misses and L1d misses,
# then the functions with the most L1i misses (TOP=25) with their instructions.
#
#   bench/icache.sh                 # the working tree, built as go build builds it
#   PGO=off bench/icache.sh a2aa13f HEAD
#
# Counts, not time: they do not follow the machine's mood, but they move by a few per
# cent from run to run, with the empty polls the client makes while it waits for the
# server (cachegrind slows it 50x, not the server). A miss costs what the L2's latency
# costs, less what the fetch unit's prefetch hides; read the count as where the cycles
# can go, then measure the time (bench/pgoab.sh, bench/samehostab.sh). Environment: PGO (auto: the command's default.pgo; off), ITERS
# (3000), TOP (25). Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/cachegrind.sh
command -v valgrind >/dev/null || { echo "bench/icache.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
iters=${ITERS:-3000}
top=${TOP:-25}
pgo=${PGO:-auto}
work=$(mktemp -d)
srv=
cleanup() {
	[ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; } || true
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 700 "$work/run"
export XDG_RUNTIME_DIR=$work/run GOVERBS_SHM=1 GOGC=off
S=127.55.0.2 C=127.55.0.3

# count BIN N: one client run of N round trips under cachegrind; its summary in $work/N.err.
count() {
	"$1" send_lat --bind $S -s 8 -n "$2" --busy-poll >/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	valgrind --tool=cachegrind "${cg_sim[@]}" \
		--cachegrind-out-file="$work/$2.out" "$1" send_lat --bind $C -s 8 -n "$2" --busy-poll $S >/dev/null 2>"$work/$2.err"
	wait "$srv"
	srv=
}
# field N NAME: cachegrind's total NAME ("I   refs", "I1  misses", "D1  misses") of run N.
field() { cg_total "$work/$1.err" "$2"; }

measure() { # measure BIN LABEL
	local a=$iters b=$((3 * iters)) d=$((2 * iters))
	count "$1" "$a"
	count "$1" "$b"
	awk -v l="$2" -v d="$d" -v i0="$(field $a 'I   refs')" -v i1="$(field $b 'I   refs')" \
		-v m0="$(field $a 'I1  misses')" -v m1="$(field $b 'I1  misses')" \
		-v x0="$(field $a 'D1  misses')" -v x1="$(field $b 'D1  misses')" \
		'BEGIN { printf "%-12s instructions %6.0f  L1i misses %4.0f  L1d misses %4.0f  per round trip\n", l, (i1-i0)/d, (m1-m0)/d, (x1-x0)/d }'
	cg_diff "$work/$a.out" "$work/$b.out" >"$work/diff.out" 2>/dev/null
	cg_annotate --show-percs=no --show=I1mr,Ir --sort=I1mr "$work/diff.out" 2>/dev/null |
		awk -v d="$d" -v top="$top" '
			$1 ~ /^[0-9,]+$/ && $2 ~ /^[0-9,]+$/ && NF >= 3 && $NF !~ /PROGRAM|TOTALS/ && shown < top {
				m = $1; gsub(",", "", m); i = $2; gsub(",", "", i)
				f = $NF; sub(/.*:/, "", f); sub(/^github\.com\/goverbs\/goverbs\//, "", f)
				printf "    %5.1f misses %6.0f instructions  %s\n", m / d, i / d, f; shown++
			}'
}

if [ $# -eq 0 ]; then
	go build -pgo="$pgo" -o "$work/goverbs" ./cmd/goverbs
	measure "$work/goverbs" "$(git describe --always --dirty)"
	exit 0
fi
for rev in "$@"; do
	name=$(git rev-parse --short "$rev")
	git worktree add -q --detach "$work/src-$name" "$rev"
	(cd "$work/src-$name" && go build -pgo="$pgo" -o "$work/$name" ./cmd/goverbs)
	measure "$work/$name" "$name"
done
