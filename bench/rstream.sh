#!/usr/bin/env bash
# bench/rstream.sh [REV...]: rdmanet against Go TCP with `goverbs rstream` (librdmacm's
# rstream; --tcp runs the same transfers over net.TCPConn), in three placements, with
# goverbs' own write_bw beside it. Each round runs every variant once in each mode,
# interleaved: rdmanet built at each REV (default: the working tree), then TCP; even rounds
# run them in the reverse order (order, below).
#   - loopback: two processes on loopback addresses;
#   - veth:     two processes in two network namespaces joined by a veth pair at MTU 1500
#               (needs root and iproute2; skipped otherwise, or with VETH=0);
#   - inproc:   both ends in one process (rstream --loop; INPROC=0 leaves it out, for
#               revisions older than --loop).
# Two measurements per variant and mode:
#   - stream bandwidth: -S 65536 -C $BW_COUNT -I 1 (64 KiB transfers, one way and then
#     back), Gb/sec;
#   - 64 B request/response: -S 64 -C 1 -I $RR_ITERS, usec per one-way transfer.
# And once per round, on loopback: `goverbs write_bw -s 65536 -n $WB_ITERS` (the verbs'
# RC WRITE, what rdmanet's stream rides on), Gb/s.
# It prints every round's figures, then per mode and variant the medians, each round's
# ratio to TCP (bandwidth: rdma/tcp, above 1 is better; request/response time:
# rdma/tcp, below 1 is better) and the median of those ratios, and the stream's ratio to
# write_bw (bench/report -rstream).
#
#   cpu excl bench/rstream.sh                  # ROUNDS=5 BW_COUNT=4000 RR_ITERS=20000
#   cpu excl bench/rstream.sh bd5994b HEAD     # before and after a change, beside TCP
#   PIN="taskset -c 0" bench/rstream.sh        # every process on one core (adverse scheduling)
#
# The rows (rstream.json) and the run's description (meta.json) go to OUT (default
# docs/perf/rstream); with the default OUT the run regenerates docs/PERFORMANCE.md.
#
# Run it alone on the machine: other load moves the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
bwcount=${BW_COUNT:-4000}
rriters=${RR_ITERS:-20000}
wbiters=${WB_ITERS:-$bwcount}
out=${OUT:-docs/perf/rstream}
pin=${PIN:-}
veth=${VETH:-1}
if [ "$veth" = 1 ] && { [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; }; then
	echo "rstream.sh: no veth mode (it needs root and iproute2)" >&2
	veth=0
fi
repro="ROUNDS=$rounds BW_COUNT=$bwcount RR_ITERS=$rriters WB_ITERS=$wbiters${PIN:+ PIN=\"$PIN\"}${VETH:+ VETH=$VETH}${OUT:+ OUT=$OUT} bench/rstream.sh $*"
. bench/meta.sh
. bench/probe.sh

work=$(mktemp -d)
A=gvrs-a-$$ B=gvrs-b-$$ S=192.0.2.1 C=192.0.2.2 # TEST-NET-1: exists only in the namespaces
cleanup() {
	for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done
	rm -rf "$work"
	if [ "$veth" = 1 ]; then ip netns del "$A" 2>/dev/null || true; ip netns del "$B" 2>/dev/null || true; fi
}
trap cleanup EXIT
if [ "$veth" = 1 ]; then
	# As bench/veth.sh: the server in namespace A, the client in B, a veth pair at MTU 1500.
	. bench/vethpair.sh
	veth_pair "$A" "$B" $S $C
	ip -n "$A" link set va mtu 1500
	ip -n "$B" link set vb mtu 1500
fi
variants=()
if [ $# -eq 0 ]; then
	go build -o "$work/rdma-tree" ./cmd/goverbs
	variants=(rdma-tree)
else
	for rev in "$@"; do
		name="rdma-$(git rev-parse --short "$rev")"
		git worktree add -q --detach "$work/src-$name" "$rev"
		(cd "$work/src-$name" && go build -o "$work/$name" ./cmd/goverbs)
		variants+=("$name")
	done
fi
# The TCP baseline is the working tree's `rstream --tcp`, whatever revisions are compared.
[ -x "$work/rdma-tree" ] || go build -o "$work/rdma-tree" ./cmd/goverbs
cp "$work/rdma-tree" "$work/tcp"
variants+=(tcp)
go build -o "$work/report" ./bench/report
go build -o "$work/xcore" ./bench/xcore
# The run's description before the last run's rows go: git describe must see the tree
# as committed, or every run would call its commit dirty.
write_meta "$out" "$repro"
rm -f "$out/rstream.json"

# One rstream run in MODE: the server, then the client, as two processes (loopback:
# fresh loopback addresses; veth: the namespaces' addresses), or one (inproc); prints
# the client's row.
pair() { # pair MODE BIN ARGS...
	local mode=$1 bin=$2; shift 2
	local net=127.$((RANDOM % 64 + 128)).$((RANDOM % 256)).$((RANDOM % 126 * 2 + 2))
	local srv=$net cli=${net%.*}.$((${net##*.} + 1)) port=$((RANDOM % 20000 + 20000))
	local insrv=() incli=()
	case $mode in
	inproc)
		if ! timeout 120 $pin "$bin" rstream --loop -b "$srv" -p "$port" "$@" >"$work/cli.out" 2>&1; then
			echo "rstream --loop $* failed:" >&2
			cat "$work/cli.out" >&2
			exit 1
		fi
		sed -n 2p "$work/cli.out"
		return ;;
	veth) srv=$S cli=$C insrv=(ip netns exec "$A") incli=(ip netns exec "$B") ;;
	esac
	"${insrv[@]}" $pin "$bin" rstream -b "$srv" -p "$port" "$@" >"$work/srv.out" 2>&1 &
	local sp=$!
	for _ in $(seq 100); do grep -q '^name' "$work/srv.out" 2>/dev/null && break; sleep 0.05; done
	if ! timeout 120 "${incli[@]}" $pin "$bin" rstream -b "$cli" -s "$srv" -p "$port" "$@" >"$work/cli.out" 2>&1; then
		kill "$sp" 2>/dev/null || true
		echo "rstream $* ($mode) failed:" >&2
		cat "$work/cli.out" "$work/srv.out" >&2
		exit 1
	fi
	wait "$sp"
	sed -n 2p "$work/cli.out"
}

# goverbs write_bw 64 KiB, two processes on loopback: Gb/s (its MiB/s × 8 × 2^20 / 10^9).
writebw() {
	local net=127.$((RANDOM % 64 + 128)).$((RANDOM % 256)).$((RANDOM % 126 * 2 + 2))
	local srv=$net cli=${net%.*}.$((${net##*.} + 1)) port=$((RANDOM % 20000 + 20000))
	$pin "$work/rdma-tree" write_bw --bind "$srv" -p "$port" -s 65536 -n "$wbiters" --json >"$work/wb.srv" 2>&1 &
	local sp=$!
	sleep 0.3
	if ! timeout 120 $pin "$work/rdma-tree" write_bw --bind "$cli" -p "$port" -s 65536 -n "$wbiters" --json "$srv" >"$work/wb.cli" 2>&1; then
		kill "$sp" 2>/dev/null || true
		echo "write_bw failed:" >&2
		cat "$work/wb.cli" "$work/wb.srv" >&2
		exit 1
	fi
	wait "$sp"
	sed -n 's/.*"bw_avg_mib_s":\([0-9.e+]*\).*/\1/p' "$work/wb.cli" | tail -1 | awk '{printf "%.3f", $1 * 8 * 1048576 / 1e9}'
}

modes=(loopback)
[ "$veth" = 1 ] && modes+=(veth)
[ "${INPROC:-1}" = 1 ] && modes+=(inproc) # INPROC=0: revisions before `rstream --loop`
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
	for mode in "${modes[@]}"; do
		for v in $(order "$r"); do
			extra=()
			[ "$v" = tcp ] && extra=(--tcp)
			# bench/xcore frames the stream: the machine's cross-core copy rate has
			# phases 4-5x apart on a VM, and the report tells the rounds apart by it.
			x0=$(probe "$work/xcore")
			bw=$(pair "$mode" "$work/$v" "${extra[@]}" -S 65536 -C "$bwcount" -I 1 | awk '{print $7}')
			x1=$(probe "$work/xcore")
			rr=$(pair "$mode" "$work/$v" "${extra[@]}" -S 64 -C 1 -I "$rriters" | awk '{print $NF}')
			echo "round $r $mode $v bw_gbps $bw rr_usec $rr (xcore GB/s $x0 $x1)" >&2
			printf '{%s"round":%d,"mode":"%s","variant":"%s","bw_gbps":%s,"rr_us":%s}\n' "$(probe_json xcore_gbps "$x0" "$x1")" "$r" "$mode" "$v" "$bw" "$rr" >>"$out/rstream.json"
		done
	done
	wb=$(writebw)
	echo "round $r loopback write_bw bw_gbps $wb" >&2
	printf '{"round":%d,"mode":"loopback","variant":"write_bw","bw_gbps":%s}\n' "$r" "$wb" >>"$out/rstream.json"
done

echo
echo "rdmanet against Go TCP, $rounds interleaved rounds. Reproduce: \`$repro\`"
"$work/report" -rstream "$out"
case "$out" in
docs/perf/*)
	"$work/report" -page docs/PERFORMANCE.md docs/perf
	echo "docs/PERFORMANCE.md regenerated from docs/perf: commit the rows with it" >&2 ;;
*) echo "results in $out; docs/PERFORMANCE.md is generated from docs/perf only" >&2 ;;
esac
