#!/usr/bin/env bash
# bench/rrlat.sh [REV...]: rdmanet's 64 B request/response between two processes on
# loopback as percentiles of one-way time (bench/rrlat), rdmanet built at each REV
# (default: the working tree), in interleaved rounds (even rounds in the reverse order).
# rstream's mean hides whether the two processes' threads shared a core: apart a median
# of 2.6-3.1 us on 2 cores, together 5.3-6.3 (docs/DESIGN.md, "What a spin must not do").
#
#   bench/rrlat.sh b1b9151 HEAD             # ROUNDS=5 ITERS=40000 by default
#   PIN="taskset -c 0" bench/rrlat.sh HEAD  # both processes on one core
#   VETH=1 bench/rrlat.sh c4f8d87 HEAD      # over a veth pair at MTU 1500 (root, iproute2)
#
# With VETH=1 the server runs in one network namespace and the client in another, joined
# by a veth pair at MTU 1500 (bench/vethpair.sh, as bench/rstream.sh's veth mode): a
# network path, which the same-host shortcut does not take.
#
# bench/rrlat/main.go is copied into each revision's tree: it uses rdmanet's public API
# only. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
iters=${ITERS:-40000}
pin=${PIN:-}
veth=${VETH:-0}
work=$(mktemp -d)
A=gvrr-a-$$ B=gvrr-b-$$ S=192.0.2.1 C=192.0.2.2 # TEST-NET-1: exists only in the namespaces
cleanup() {
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
	if [ "$veth" = 1 ]; then ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; fi
}
trap cleanup EXIT
insrv=() incli=()
if [ "$veth" = 1 ]; then
	. bench/vethpair.sh
	veth_pair "$A" "$B" $S $C
	ip -n "$A" link set va mtu 1500
	ip -n "$B" link set vb mtu 1500
	insrv=(ip netns exec "$A") incli=(ip netns exec "$B")
fi
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
# order R prints the variants in round R's order: as given in odd rounds, reversed in
# even ones. Whatever runs second in a pair gains from it (the first warms the page
# cache and the CPUs' frequency, or leaves work behind): 64 KiB stream bandwidth came out
# 1.04-1.23x for a change with no effect on the stream when it ran second in every
# round, and 0.87-1.00x when it ran first (3 and 1 runs, 2026-11-27).
order() {
	if [ $(($1 % 2)) = 1 ]; then
		printf '%s\n' "${variants[@]}"
	else
		for ((i = ${#variants[@]} - 1; i >= 0; i--)); do printf '%s\n' "${variants[i]}"; done
	fi
}
for r in $(seq "$rounds"); do
	for v in $(order "$r"); do
		net=127.$((RANDOM % 64 + 128)).$((RANDOM % 256)).$((RANDOM % 126 * 2 + 2))
		srv=$net cli=${net%.*}.$((${net##*.} + 1)) port=$((RANDOM % 20000 + 20000))
		[ "$veth" = 1 ] && srv=$S cli=$C
		"${insrv[@]}" $pin "$work/$v" -b "$srv" -p "$port" >"$work/srv.out" 2>&1 &
		sp=$!
		for _ in $(seq 100); do grep -q '^listening' "$work/srv.out" 2>/dev/null && break; sleep 0.05; done
		if ! out=$(timeout 120 "${incli[@]}" $pin "$work/$v" -b "$cli" -s "$srv" -p "$port" -n "$iters" 2>&1); then
			kill "$sp" 2>/dev/null || true
			echo "rrlat $v failed: $out" >&2
			exit 1
		fi
		wait "$sp"
		echo "round $r $v $out"
	done
done
