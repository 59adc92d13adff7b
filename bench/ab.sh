# Sourced by bench/samehostab.sh, bench/daemonab.sh and bench/pgoab.sh, the A/B scripts.
#
# ab_build WORK BUILD REV...: each revision checked out in a worktree under WORK
# (src-NAME; the caller removes them) and built there by the command BUILD, given
# WORK/NAME as its output path; the revisions' short names go to names[].
ab_build() {
	local work=$1 build=$2 rev name
	shift 2
	names=()
	for rev in "$@"; do
		name=$(git rev-parse --short "$rev")
		git worktree add -q --detach "$work/src-$name" "$rev"
		(cd "$work/src-$name" && $build "$work/$name")
		names+=("$name")
	done
}

# ab_medians ROWS OLD NEW M... prints, for each measurement M, the median of the rounds' NEW ÷ OLD ratios and the
# ratios sorted, from ROWS ("ROUND REVISION MEASUREMENT VALUE" a line; a round missing
# either value is left out).
ab_medians() {
	local rows=$1 old=$2 new=$3
	shift 3
	local m
	for m in "$@"; do
		awk -v m="$m" -v old="$old" -v new="$new" '
			$3 == m && $4 != "" { v[$1, $2] = $4; rounds[$1] = 1 }
			END {
				n = 0
				for (r in rounds) if (v[r, old] > 0 && v[r, new] != "") { q[n++] = v[r, new] / v[r, old] }
				if (n == 0) { printf "%-9s no pairs\n", m; exit }
				for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
				med = (n % 2) ? q[int(n / 2)] : (q[n / 2 - 1] + q[n / 2]) / 2
				s = ""; for (i = 0; i < n; i++) s = s sprintf(" %.3f", q[i])
				printf "%-9s median %.3f  (sorted:%s)\n", m, med, s
			}' "$rows"
	done
}

# ab_perf BIN WHAT SERVER-ARGS -- CLIENT-ARGS: one goverbs perftest server/client pair,
# the server on $S and the client on $C (the caller's addresses, with GOVERBS_SHM as the
# caller's environment has it); prints the client's figure: bw_avg_mib_s (WHAT bw),
# msg_rate_mpps (rate) or t_typical_us (anything else). The server's pid is in srv while
# it runs, for the caller's cleanup.
ab_perf() {
	local b=$1 what=$2
	shift 2
	local sargs=()
	while [ "$1" != "--" ]; do sargs+=("$1"); shift; done
	shift
	"$b" "${sargs[@]}" --bind $S --json >/dev/null 2>&1 &
	srv=$!
	sleep 0.3
	local row
	row=$("$b" "$@" --bind $C --json $S 2>/dev/null | tail -1)
	wait "$srv" || true
	srv=
	case $what in
	bw) sed -n 's/.*"bw_avg_mib_s":\([0-9.e+]*\).*/\1/p' <<<"$row" ;;
	rate) sed -n 's/.*"msg_rate_mpps":\([0-9.e+]*\).*/\1/p' <<<"$row" ;;
	*) sed -n 's/.*"t_typical_us":\([0-9.e+]*\).*/\1/p' <<<"$row" ;;
	esac
}

# ab_order ROUND: the revisions' names (names[]) in ROUND's order, as given in odd rounds
# and reversed in even ones (whatever runs second gains from it).
ab_order() {
	if [ $(($1 % 2)) = 1 ]; then echo "${names[0]} ${names[1]}"; else echo "${names[1]} ${names[0]}"; fi
}
