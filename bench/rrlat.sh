#!/usr/bin/env bash
# bench/rrlat.sh [REV...]: rdmanet's 64 B request/response between two processes on
# loopback as percentiles of one-way time (bench/rrlat), rdmanet built at each REV
# (default: the working tree), in interleaved rounds. rstream's mean hides whether the
# two processes' threads shared a core: apart a median of 2.6-3.1 us on 2 cores,
# together 5.3-6.3 (docs/DESIGN.md, "What a spin must not do").
#
#   bench/rrlat.sh b1b9151 HEAD             # ROUNDS=5 ITERS=40000 by default
#   PIN="taskset -c 0" bench/rrlat.sh HEAD  # both processes on one core
#
# bench/rrlat/main.go is copied into each revision's tree: it uses rdmanet's public API
# only. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
iters=${ITERS:-40000}
pin=${PIN:-}
work=$(mktemp -d)
cleanup() {
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
}
trap cleanup EXIT
variants=()
if [ $# -eq 0 ]; then
	go build -o "$work/tree" ./bench/rrlat
	variants=(tree)
else
	for rev in "$@"; do
		name=$(git rev-parse --short "$rev")
		git worktree add -q --detach "$work/src-$name" "$rev"
		mkdir -p "$work/src-$name/bench/rrlat"
		cp bench/rrlat/main.go "$work/src-$name/bench/rrlat/"
		(cd "$work/src-$name" && go build -o "$work/$name" ./bench/rrlat)
		variants+=("$name")
	done
fi
for r in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		net=127.$((RANDOM % 64 + 128)).$((RANDOM % 256)).$((RANDOM % 126 * 2 + 2))
		srv=$net cli=${net%.*}.$((${net##*.} + 1)) port=$((RANDOM % 20000 + 20000))
		$pin "$work/$v" -b "$srv" -p "$port" >"$work/srv.out" 2>&1 &
		sp=$!
		for _ in $(seq 100); do grep -q '^listening' "$work/srv.out" 2>/dev/null && break; sleep 0.05; done
		if ! out=$(timeout 120 $pin "$work/$v" -b "$cli" -s "$srv" -p "$port" -n "$iters" 2>&1); then
			kill "$sp" 2>/dev/null || true
			echo "rrlat $v failed: $out" >&2
			exit 1
		fi
		wait "$sp"
		echo "round $r $v $out"
	done
done
