# Shared by bench/compare.sh and bench/veth.sh (sourced, from the repository's root):
# build the binaries, run one server/client pair at a time, clean up on exit.
#
# The sourcing script sets $out (the results directory) before calling pair, and may add
# functions to cleanup_hooks; they run on exit, after the running server is stopped.

bin=$(mktemp -d)
srv_pid=
failures=()
cleanup_hooks=()

bench_cleanup() {
  if [ -n "$srv_pid" ]; then
    kill "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true
  fi
  local h
  for h in "${cleanup_hooks[@]}"; do "$h"; done
  rm -rf "$bin"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# build: goverbs' tools, the standard-library baseline and the table maker, into $bin.
build() {
  go build -o "$bin/goverbs" ./cmd/goverbs
  go build -o "$bin/nettest" ./bench/nettest
  go build -o "$bin/report" ./bench/report
  g="$bin/goverbs" n="$bin/nettest"
}

# pair NAME ROUND SERVER-CMD... -- CLIENT-CMD...: start the server in the background,
# run the client, append the client's JSON rows (tagged with the round, so that report
# pairs a run with its baseline's same round) to $out/NAME.json, stop the server. A
# failed client is recorded in failures and the run goes on.
pair() {
  local name=$1 round=$2
  shift 2
  local srv=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done
  shift
  echo "== round $round: $name" >&2
  echo "== round $round: $name: ${srv[*]} -- $*" >>"$out/log.txt"
  "${srv[@]}" >/dev/null 2>>"$out/log.txt" &
  srv_pid=$!
  sleep 0.5
  local rows
  if rows=$(timeout "${TIMEOUT:-300}" "$@" 2>>"$out/log.txt") && [ -n "$rows" ]; then
    printf '%s\n' "$rows" | sed "s/^{/{\"round\":$round,/" | tee -a "$out/$name.json" >&2
  else
    echo "FAILED: round $round $name (see $out/log.txt)" >&2
    failures+=("round $round $name")
  fi
  kill "$srv_pid" 2>/dev/null || true # the servers that serve one client have exited already
  wait "$srv_pid" 2>/dev/null || true
  srv_pid=
  sleep 0.5
}

# write_page DIR: regenerate docs/PERFORMANCE.md from docs/perf if DIR is under it (the
# scripts' default), else say where the rows are.
write_page() {
  case "$1" in
  docs/perf/*)
    "$bin/report" -page docs/PERFORMANCE.md docs/perf
    echo "docs/PERFORMANCE.md regenerated from docs/perf: commit the rows with it" >&2 ;;
  *) echo "results in $1; docs/PERFORMANCE.md is generated from docs/perf only" >&2 ;;
  esac
}

# report_failures prints what failed and returns non-zero if anything did.
report_failures() {
  [ ${#failures[@]} -eq 0 ] && return 0
  echo "failed runs (their rounds are left out of the table):" >&2
  printf '  %s\n' "${failures[@]}" >&2
  return 1
}
