#!/usr/bin/env bash
# compare.sh: Debian's perftest on goverbs' libibverbs.so.1 against goverbs' own Go tools,
# in the same run: ib_write_bw 64 KiB (bandwidth) and ib_send_lat 8 B (typical latency),
# two processes on loopback, both sides in the same mode, rounds interleaved so a slow
# spell of the machine slows both alike. Prints each round and the median of the
# per-round ratios (C/Go: issue 14 asks >= 0.9x bandwidth, <= 1.2x latency).
#
# Latency is compared twice: against goverbs send_lat as it runs by default, and against
# goverbs send_lat --wait-send, which runs ib_send_lat's own loop (each send's completion,
# the peer's ACK, awaited before the reply is looked for; perftest's tx depth is 1). The
# second is the price of the C ABI itself; the first adds what perftest's loop costs.
#
#   bash capi/compare.sh            ROUNDS=5 DURATION=3 ITERS=20000 MODE=busy by default
#
# MODE=busy: busy-poll on both sides (the C library's default, the Go tools' --busy-poll);
# MODE=default: neither (GOVERBS_BUSY_POLL=0 for the C library).
#
# FLAVOUR=attach compares the C flavour (capi/build.sh -attach: no Go runtime in the
# program, every device attached to a goverbs serve daemon this script starts on the two
# addresses) against the same Go tools running their devices in-process (issue 27: busy
# 8 B latency <= 1.2x, 64 KiB bandwidth >= 0.9x). The C flavour has no busy-poll mode of
# its own (perftest spins on its CQ either way); MODE still sets the Go tools'.
#
# Needs perftest and what capi/build.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${ROUNDS:-5} D=${DURATION:-3} N=${ITERS:-20000} MODE=${MODE:-busy} FLAVOUR=${FLAVOUR:-inprocess}
case $MODE in
  busy) busy=1 gflag=--busy-poll ;;
  default) busy=0 gflag= ;;
  *) echo "MODE is busy or default" >&2; exit 2 ;;
esac
S=127.51.0.2 C=127.51.0.3 P=18777
GS=$S GC=$C # the Go tools' addresses: others while a daemon holds S and C
tmp=$(mktemp -d)
daemon=
trap '[ -z "$daemon" ] || kill "$daemon" 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/goverbs" ./cmd/goverbs
at=
case $FLAVOUR in
  inprocess) bash capi/build.sh "$tmp/lib" >/dev/null ;;
  attach)
    bash capi/build.sh -attach "$tmp/lib" >/dev/null
    mkdir -m 700 "$tmp/run"
    export XDG_RUNTIME_DIR=$tmp/run
    "$tmp/goverbs" serve "s0=$S,c0=$C" >"$tmp/serve.log" 2>&1 &
    daemon=$!
    sleep 0.5
    at=@serve GS=127.51.0.4 GC=127.51.0.5 ;;
  *) echo "FLAVOUR is inprocess or attach" >&2; exit 2 ;;
esac

# run NAME SERVER-CMD... -- CLIENT-CMD...: runs both, prints the client's result row.
run() {
  local srv=() cli=()
  while [ "$1" != -- ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  "${srv[@]}" >"$tmp/srv.log" 2>&1 &
  local pid=$!
  sleep 1
  "${cli[@]}" >"$tmp/cli.log" 2>&1 || { cat "$tmp/cli.log" "$tmp/srv.log" >&2; exit 1; }
  wait $pid
  awk '/#bytes/ {getline; print; exit}' "$tmp/cli.log"
}
cenv() { env LD_LIBRARY_PATH="$tmp/lib" GOVERBS_BUSY_POLL=$busy GOVERBS_DEVICES="$1=$2$at" "${@:3}"; }

: >"$tmp/bw" ; : >"$tmp/lat"
for r in $(seq "$R"); do
  cbw=$(run cenv s0 $S ib_write_bw -d s0 -x 0 -p $P -s 65536 -D "$D" -- \
            cenv c0 $C ib_write_bw -d c0 -x 0 -p $P -s 65536 -D "$D" 127.0.0.1 | awk '{print $4}')
  gbw=$(run "$tmp/goverbs" write_bw --bind $GS -p $P -s 65536 -D "$D" $gflag -- \
            "$tmp/goverbs" write_bw --bind $GC -p $P -s 65536 -D "$D" $gflag $GS | awk '{print $4}')
  clat=$(run cenv s0 $S ib_send_lat -d s0 -x 0 -p $P -s 8 -n "$N" -- \
             cenv c0 $C ib_send_lat -d c0 -x 0 -p $P -s 8 -n "$N" 127.0.0.1 | awk '{print $5}')
  glat=$(run "$tmp/goverbs" send_lat --bind $GS -p $P -s 8 -n "$N" $gflag -- \
             "$tmp/goverbs" send_lat --bind $GC -p $P -s 8 -n "$N" $gflag $GS | awk '{print $5}')
  wlat=$(run "$tmp/goverbs" send_lat --bind $GS -p $P -s 8 -n "$N" $gflag --wait-send -- \
             "$tmp/goverbs" send_lat --bind $GC -p $P -s 8 -n "$N" $gflag --wait-send $GS | awk '{print $5}')
  echo "$cbw $gbw" >>"$tmp/bw"
  echo "$clat $glat" >>"$tmp/lat"
  echo "$clat $wlat" >>"$tmp/wlat"
  printf 'round %d: write_bw 64 KiB C %s Go %s MiB/s (%.2fx)   send_lat 8 B C %s us, Go %s (%.2fx), Go --wait-send %s (%.2fx)\n' \
    "$r" "$cbw" "$gbw" "$(echo "$cbw $gbw" | awk '{print $1/$2}')" \
    "$clat" "$glat" "$(echo "$clat $glat" | awk '{print $1/$2}')" "$wlat" "$(echo "$clat $wlat" | awk '{print $1/$2}')"
done
median() { awk '{print $1/$2}' "$1" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "median per-round ratio C/Go ($MODE, C flavour $FLAVOUR): write_bw $(median "$tmp/bw")x, send_lat $(median "$tmp/lat")x, send_lat against --wait-send $(median "$tmp/wlat")x"
