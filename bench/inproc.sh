#!/usr/bin/env bash
# bench/inproc.sh OLD NEW: the verbs package's in-process benchmarks at two commits, in
# interleaved rounds, with each round's NEW/OLD ratio and their median. It answers "did
# this change move the hot path?" (a refactor must stay within noise), not "how fast is
# goverbs against the standard library?": that is bench/compare.sh's job.
#
#   bench/inproc.sh a70e82e HEAD            # ROUNDS=5, BENCHTIME=2s by default
#
# Run it alone on the machine: two cores, and nothing else beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Resolved here, in the caller's checkout: a symbolic NEW such as HEAD would otherwise
# name the temporary worktree's own HEAD below, which is OLD.
old=$(git rev-parse --verify "${1:?usage: bench/inproc.sh OLD NEW}^{commit}")
new=$(git rev-parse --verify "${2:?usage: bench/inproc.sh OLD NEW}^{commit}")
# Both commits on the kernel's UDP path: since c4f8d87 two devices of one process meet
# through the same-host rings by default, and a commit before it would be compared on
# UDP with one after it on the rings (BenchmarkRCWrite64K read 1.78x for that alone).
# GOVERBS_SHM=1 in the caller's environment compares both on the rings.
export GOVERBS_SHM=${GOVERBS_SHM:-0}
rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-2s}
manyrounds=${MANY_ROUNDS:-3}

work=$(mktemp -d)
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/src" "$old"
(cd "$work/src/verbs" && go test -c -o "$work/old.test" .)
git -C "$work/src" checkout -q --detach "$new"
(cd "$work/src/verbs" && go test -c -o "$work/new.test" .)

# Benchmarks find their testdata relative to the package directory.
cd "$work/src/verbs"
run() { # run NAME ROUND ARGS...: one benchmark binary's rows, tagged
	local v=$1 r=$2; shift 2
	"$work/$v.test" -test.run '^$' -test.benchmem "$@" 2>&1 | awk -v v="$v" -v r="$r" '/^Benchmark/ {print v, r, $0}'
}
for r in $(seq "$rounds"); do
	for v in old new; do
		run $v "$r" -test.bench 'BenchmarkRCWrite64K$|BenchmarkRCSendPingPong8InMemory$' -test.benchtime "$benchtime"
	done
done >"$work/rows"
for r in $(seq "$manyrounds"); do
	for v in old new; do
		run $v "$r" -test.bench 'BenchmarkManyQPsWrite64K$' -test.benchtime 20000x
	done
done >>"$work/rows"

echo "bench/inproc.sh $old $new (ROUNDS=$rounds BENCHTIME=$benchtime MANY_ROUNDS=$manyrounds GOVERBS_SHM=$GOVERBS_SHM)"
cat "$work/rows"
# Per round: new/old of MB/s where the benchmark reports it, else of ns/op.
awk '
{ name=$3; sub(/-[0-9]+$/, "", name); v=$1; r=$2
  val=""; unit=""
  for (i=4; i<NF; i++) if ($(i+1)=="MB/s") { val=$i; unit="MB/s" }
  if (val=="") for (i=4; i<NF; i++) if ($(i+1)=="ns/op") { val=$i; unit="ns/op" }
  x[name, r, v]=val; u[name]=unit; if (!(name in seen)) { seen[name]=1; order[++n]=name }
  if (r > maxr[name]) maxr[name]=r }
END {
  print ""
  for (k=1; k<=n; k++) { b=order[k]; m=0
    for (r=1; r<=maxr[b]; r++) if (x[b,r,"old"]!="" && x[b,r,"new"]!="") ratio[++m]=x[b,r,"new"]/x[b,r,"old"]
    for (i=1; i<=m; i++) for (j=i+1; j<=m; j++) if (ratio[j]<ratio[i]) { t=ratio[i]; ratio[i]=ratio[j]; ratio[j]=t }
    med = (m%2) ? ratio[(m+1)/2] : (ratio[m/2]+ratio[m/2+1])/2
    printf "%-36s new/old %s, median of %d per-round ratios: %.3f (%.3f-%.3f)\n", b, u[b], m, med, ratio[1], ratio[m]
  }
}' "$work/rows"
