#!/usr/bin/env bash
# bench/rxebw.sh [WRITE_BW ARGS...]: `goverbs write_bw -d rxe0` against perftest's
# `ib_write_bw -d rxe0` in the rxe VM (../shared/rxe-vm, already up), in interleaved
# rounds: each round one ib_write_bw pair, then one goverbs pair, both on rxe0 (rxe
# loopback, GID index 1), the server started 2 s before its client. It prints each
# run's BW average, the client's CPU times and rxe's retransmissions
# (completer_retry_err), then each round's goverbs/perftest ratio and their median.
#
#   bench/rxebw.sh                    # ROUNDS=5; the runs use -n 2000 (64 KiB WRITEs)
#   OLD=/tmp/goverbs-old bench/rxebw.sh   # also a second goverbs binary in each round
#
# The VM is shared (take its lock) and slow (TCG): run it alone on the machine, e.g.
# under `cpu excl`; a loaded host moves every figure. rxe's retransmissions differ from
# run to run and move a run's figure too: read the median of several rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
vm=${RXE_VM_DIR:-../shared/rxe-vm}
[ $# -gt 0 ] || set -- -n 2000
guest() { "$vm/guest.sh" "$@"; }
guest_ip=$(guest "ip -4 -o addr show eth0" | awk '{sub("/.*", "", $4); print $4}')

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
CGO_ENABLED=1 go build -tags ibverbs -o "$bin/goverbs" ./cmd/goverbs
guest 'cat > /tmp/gv-new && chmod +x /tmp/gv-new' < "$bin/goverbs"
tools=(perftest /tmp/gv-new)
if [ -n "${OLD:-}" ]; then
	guest 'cat > /tmp/gv-old && chmod +x /tmp/gv-old' < "$OLD"
	tools+=(/tmp/gv-old)
fi

# run TOOL: one pair in the guest; prints "BW RETRIES USER SYS".
run() {
	local cmd=ib_write_bw
	[ "$1" = perftest ] || cmd="$1 write_bw"
	shift
	guest "c=/sys/class/infiniband/rxe0/ports/1/hw_counters/completer_retry_err
		r0=\$(cat \$c)
		timeout 90 $cmd -d rxe0 -x 1 $* > /tmp/rxebw.srv 2>&1 &
		sleep 2
		timeout 90 /usr/bin/time -f 'cpu %U %S' $cmd -d rxe0 -x 1 $* $guest_ip > /tmp/rxebw.cli 2>&1 || { cat /tmp/rxebw.cli >&2; exit 1; }
		wait \$! || { cat /tmp/rxebw.srv >&2; exit 1; }
		bw=\$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ {v = \$4} END {print v}' /tmp/rxebw.cli)
		cpu=\$(awk '/^cpu / {print \$2, \$3}' /tmp/rxebw.cli)
		echo \$bw \$((\$(cat \$c) - r0)) \$cpu"
}

ratios=()
for r in $(seq "$rounds"); do
	base=
	for t in "${tools[@]}"; do
		read -r bw retries user sys < <(run "$t" "$@")
		[ -n "$base" ] || base=$bw
		ratio=$(awk -v a="$bw" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
		printf 'round %d %-12s BW %7s  client user %ss sys %ss  retries %3s  /perftest %s\n' \
			"$r" "${t#/tmp/}" "$bw" "$user" "$sys" "$retries" "$ratio"
		[ "$t" != /tmp/gv-new ] || ratios+=("$ratio")
	done
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1} END {
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "goverbs/perftest per round: median %.3f (%.3f-%.3f), %d rounds\n", m, v[1], v[NR], NR}'
