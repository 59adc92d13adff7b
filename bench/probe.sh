# Sourced by bench/lib.sh and bench/rstream.sh (from the repository's root).
#
# probe XCORE: print bench/xcore's figure, the machine's cross-core copy rate now in GB/s
# (XCORE is its built binary), or nothing: with XCORE=0 in the environment, or where it
# cannot run (one CPU, not Linux). A run goes on without it; its rows then carry none.
probe() {
  [ "${XCORE:-1}" != 0 ] && [ -x "$1" ] || return 0
  "$1" 2>/dev/null || true
}

# probe_json KEY BEFORE AFTER: `"KEY":[BEFORE,AFTER],` for a JSON row, or nothing when
# either probe printed nothing.
probe_json() {
  [ -n "$2" ] && [ -n "$3" ] && printf '"%s":[%s,%s],' "$1" "$2" "$3"
  return 0
}
