# Sourced by the bench scripts: write_meta DIR COMMAND records how and where a run is made
# (DIR/meta.json, one JSON object), which bench/report prints above the run's figures.
write_meta() {
  local dir=$1 cmd=$2 commit
  commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
  local cpu
  cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
  mkdir -p "$dir"
  # json_str S: S as a JSON string (backslashes and quotes escaped; the values have no
  # control characters).
  json_str() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }
  printf '{"command":%s,"date":%s,"commit":%s,"go":%s,"kernel":%s,"cpu":%s,"cores":%d,"load":%s}\n' \
    "$(json_str "$cmd")" "$(json_str "$(date -u +%Y-%m-%dT%H:%MZ)")" "$(json_str "$commit")" \
    "$(json_str "$(go env GOVERSION 2>/dev/null || echo unknown)")" "$(json_str "$(uname -r)")" \
    "$(json_str "${cpu:-unknown}")" "$(nproc 2>/dev/null || echo 0)" \
    "$(json_str "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)")" >"$dir/meta.json"
}
