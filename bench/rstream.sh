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
# is better) and the median of those ratios.
#
#   cpu excl bench/rstream.sh                  # ROUNDS=5 BW_COUNT=4000 RR_ITERS=20000
#   cpu excl bench/rstream.sh bd5994b HEAD     # before and after a change, beside TCP
#
# Run it alone on the machine: other load moves the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
bwcount=${BW_COUNT:-4000}
rriters=${RR_ITERS:-20000}

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
		echo "round $r $v bw_gbps $bw rr_usec $rr"
	done
done | tee "$work/rows"

echo
echo "bench/rstream.sh $* (ROUNDS=$rounds BW_COUNT=$bwcount RR_ITERS=$rriters), $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ)"
awk '
function median(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ r = $2; v = $3; bw[v, r] = $5; rr[v, r] = $7; if (!(v in seen)) { seen[v] = 1; order[++n] = v }; if (r > R) R = r }
END {
	print "| variant | stream 64 KiB Gb/s (median) | ÷ TCP per round | median ratio | 64 B req/resp µs one-way (median) | ÷ TCP per round | median ratio |"
	print "|---|---|---|---|---|---|---|"
	for (k = 1; k <= n; k++) {
		v = order[k]; m = 0; delete a; delete b; delete x; delete y; lb = ""; lr = ""
		for (r = 1; r <= R; r++) {
			a[++m] = bw[v, r]; b[m] = rr[v, r]
			x[m] = bw[v, r] / bw["tcp", r]; y[m] = rr[v, r] / rr["tcp", r]
			lb = lb sprintf("%.2f× ", x[m]); lr = lr sprintf("%.2f× ", y[m])
		}
		mb = median(a, m); mr = median(b, m); xb = median(x, m); xr = median(y, m)
		if (v == "tcp") printf "| %s | %.2f | | | %.2f | | |\n", v, mb, mr
		else printf "| %s | %.2f | %s| %.2f× | %.2f | %s| %.2f× |\n", v, mb, lb, xb, mr, lr, xr
	}
}' "$work/rows"
