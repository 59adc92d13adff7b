#!/usr/bin/env bash
# bench/rstream.sh [REV...]: rdmanet against Go TCP, two processes on loopback, with
# `goverbs rstream` (librdmacm's rstream; --tcp runs the same transfers over
# net.TCPConn). Each round runs every variant once, interleaved: rdmanet built at each
# REV (default: the working tree), then TCP. Two measurements per variant:
#   - stream bandwidth: -S 65536 -C $BW_COUNT -I 1 (64 KiB transfers, one way and then
#     back), Gb/sec;
#   - 64 B request/response: -S 64 -C 1 -I $RR_ITERS, usec per one-way transfer.
# It prints every round's figures, then per variant the medians, each round's ratio to
# TCP (bandwidth: rdma/tcp, above 1 is better; request/response time: rdma/tcp, below 1
# is better) and the median of those ratios (bench/report -rstream).
#
#   cpu excl bench/rstream.sh                  # ROUNDS=5 BW_COUNT=4000 RR_ITERS=20000
#   cpu excl bench/rstream.sh bd5994b HEAD     # before and after a change, beside TCP
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
out=${OUT:-docs/perf/rstream}
repro="ROUNDS=$rounds BW_COUNT=$bwcount RR_ITERS=$rriters${OUT:+ OUT=$OUT} bench/rstream.sh $*"
. bench/meta.sh

work=$(mktemp -d)
trap 'for d in "$work"/src-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1; done; rm -rf "$work"' EXIT
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
mkdir -p "$out"
rm -f "$out/rstream.json"
write_meta "$out" "$repro"

# One rstream pair on fresh loopback addresses: the server, then the client; prints the
# client's row.
pair() { # pair BIN ARGS...
	local bin=$1; shift
	local net=127.$((RANDOM % 64 + 128)).$((RANDOM % 256)).$((RANDOM % 126 * 2 + 2))
	local srv=$net cli=${net%.*}.$((${net##*.} + 1)) port=$((RANDOM % 20000 + 20000))
	"$bin" rstream -b "$srv" -p "$port" "$@" >"$work/srv.out" 2>&1 &
	local sp=$!
	for _ in $(seq 100); do grep -q '^name' "$work/srv.out" 2>/dev/null && break; sleep 0.05; done
	if ! timeout 120 "$bin" rstream -b "$cli" -s "$srv" -p "$port" "$@" >"$work/cli.out" 2>&1; then
		kill "$sp" 2>/dev/null || true
		echo "rstream $* failed:" >&2
		cat "$work/cli.out" "$work/srv.out" >&2
		exit 1
	fi
	wait "$sp"
	sed -n 2p "$work/cli.out"
}

for r in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		extra=()
		[ "$v" = tcp ] && extra=(--tcp)
		bw=$(pair "$work/$v" "${extra[@]}" -S 65536 -C "$bwcount" -I 1 | awk '{print $7}')
		rr=$(pair "$work/$v" "${extra[@]}" -S 64 -C 1 -I "$rriters" | awk '{print $NF}')
		echo "round $r $v bw_gbps $bw rr_usec $rr" >&2
		printf '{"round":%d,"variant":"%s","bw_gbps":%s,"rr_us":%s}\n' "$r" "$v" "$bw" "$rr" >>"$out/rstream.json"
	done
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
