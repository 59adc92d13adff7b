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
  go build -o "$bin/xcore" ./bench/xcore
  g="$bin/goverbs" n="$bin/nettest"
}

. bench/probe.sh

# pair NAME ROUND SERVER-CMD... -- CLIENT-CMD...: start the server in the background,
# run the client, append the client's JSON rows (tagged with the round, so that report
# pairs a run with its baseline's same round) to $out/NAME.json, stop the server. A
# failed client is recorded in failures and the run goes on. Each row also carries
# bench/xcore's figure from just before and just after the run (xcore_before,
# xcore_after): on a VM the machine's cross-core copy rate has phases 4-5x apart, and
# the report gives each measurement's ratio over the rounds that stayed in the fast one.
pair() {
  local name=$1 round=$2
  shift 2
  local srv=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done
  shift
  echo "== round $round: $name" >&2
  echo "== round $round: $name: ${srv[*]} -- $*" >>"$out/log.txt"
  local before after tags
  before=$(probe "$bin/xcore")
  start_server "${srv[@]}"
  local rows
  if rows=$(timeout "${TIMEOUT:-300}" "$@" 2>>"$out/log.txt") && [ -n "$rows" ]; then
    after=$(probe "$bin/xcore")
    tags="\"round\":$round,"
    [ -z "$before" ] || [ -z "$after" ] || tags="$tags\"xcore_before\":$before,\"xcore_after\":$after,"
    printf '%s\n' "$rows" | sed "s/^{/{$tags/" | tee -a "$out/$name.json" >&2
  else
    echo "FAILED: round $round $name (see $out/log.txt)" >&2
    failures+=("round $round $name")
  fi
  stop_server
}

# run_pairs: every pair named in the array order (its commands in the associative array
# run: server command, "--", client command) in $R interleaved rounds, then, unless
# COUNT=0, each once more with its client under perf stat (count_pair), the latency
# runs with five times the round trips ($N), so that start-up's system calls, counted
# too, weigh less. A script may define pair_setup NAME on|off, called around each run
# of the pair NAME (afxdp.sh sets the veth pair's GSO for some). Even rounds run the
# array backwards (run_queued): in the array each goverbs run comes before its baseline.
run_pairs() {
  local round t
  for round in $(seq "$R"); do
    for t in "${order[@]}"; do
      # shellcheck disable=SC2086 # the commands are words (paths and flags without spaces)
      queue "$t" ${run[$t]}
    done
    run_queued "$round"
  done
  [ "${COUNT:-1}" != 0 ] || return 0
  for t in "${order[@]}"; do
    setup_pair "$t" on
    # shellcheck disable=SC2086 # as above
    count_pair "$t" ${run[$t]//-n $N/-n $((5 * N))}
    setup_pair "$t" off
  done
}

setup_pair() { if declare -F pair_setup >/dev/null; then pair_setup "$@"; fi; }

# queue NAME ARGS...: a pair for run_queued, which runs a round's queued pairs in the
# order queued when ROUND is odd and backwards when it is even, each between
# setup_pair NAME on and off, and empties the queue. Whatever runs second of two gains
# from it on these VMs (a write_bw A/B's second binary was the faster in six rounds of
# six, whichever it was), so no side may always go second. The words are kept as one
# string, so none may hold a space.
queued=()
queue() { queued+=("$*"); }
run_queued() {
  local round=$1 i c name
  local count=${#queued[@]}
  for ((i = 0; i < count; i++)); do
    c=${queued[i]}
    [ $((round % 2)) = 1 ] || c=${queued[count - 1 - i]}
    name=${c%% *}
    setup_pair "$name" on
    # shellcheck disable=SC2086 # the words, split again
    pair "$name" "$round" ${c#* }
    setup_pair "$name" off
  done
  queued=()
}

# count_pair NAME SERVER-CMD... -- CLIENT-CMD...: the pair once more, not timed, its
# client under perf stat: one row in $out/syscalls.json with the client's system calls,
# context switches and the iterations its own last row reports (a row without them, as
# udp_rate's, counts what it delivered as "iterations"). Without perf it does nothing.
count_pair() {
  local name=$1
  shift
  command -v perf >/dev/null || return 0
  local srv=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done
  shift
  local stat="$bin/stat-$name.csv"
  echo "== count: $name" >&2
  echo "== count: $name: ${srv[*]} -- perf stat $*" >>"$out/log.txt"
  start_server "${srv[@]}"
  local rows
  if rows=$(timeout "${TIMEOUT:-300}" perf stat -x, -e raw_syscalls:sys_enter,context-switches -o "$stat" -- "$@" 2>>"$out/log.txt") && [ -n "$rows" ]; then
    local iters calls cs
    iters=$(printf '%s\n' "$rows" | sed -n 's/.*"iterations":\([0-9.e+]*\).*/\1/p' | tail -1)
    calls=$(awk -F, '$3 ~ /raw_syscalls:sys_enter/ {print $1}' "$stat")
    cs=$(awk -F, '$3 ~ /context-switches/ {print $1}' "$stat")
    printf '{"test":"%s","syscalls":%s,"context_switches":%s,"iterations":%s}\n' "$name" "${calls:-0}" "${cs:-0}" "${iters:-0}" |
      tee -a "$out/syscalls.json" >&2
  else
    echo "FAILED: count $name (see $out/log.txt)" >&2
    failures+=("count $name")
  fi
  stop_server
}

# start_server CMD...: run a pair's server in the background (its output to the log) and
# give it half a second to listen; stop_server ends it (the servers that serve one client
# have exited already) and waits half a second before the next pair.
start_server() {
  "$@" >/dev/null 2>>"$out/log.txt" &
  srv_pid=$!
  sleep 0.5
}

stop_server() {
  kill "$srv_pid" 2>/dev/null || true
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
