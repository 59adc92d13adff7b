#!/usr/bin/env bash
# bench/interop.sh [OUTDIR]: re-run the interoperability matrix against Linux Soft-RoCE in the
# rxe VM (../shared/rxe-vm: Debian 12, kernel 6.1, rdma_rxe, rdma-core 44, perftest 4.5).
# goverbs runs on the host, in the VM's network namespace, on a software device bound to the
# bridge's address; the peer runs in the guest on rxe0. Every case runs twice, goverbs as the
# server and as the client (sender and receiver for mckey); both sides must exit 0.
#
#   bench/interop.sh                     # writes docs/interop/matrix.md and docs/interop/transcripts/
#   ONLY=pingpong bench/interop.sh /tmp/x   # one family: pingpong, ipv6, cm, perftest, fabric, capi
#
# Environment:
#   RXE_VM_DIR   the harness (default ../shared/rxe-vm); its RXE_* variables pass through, so
#                RXE_NETNS=rxeio RXE_NET_PREFIX=10.79.0 keeps clear of another user's VM.
#   UP=1         boot the VM (build.sh, up.sh) if it does not answer; DOWN=1 stops it at the end.
#   GOVERBS=BIN  a goverbs binary to test (default: built from this tree into a temp dir).
#   ONLY=FAMILY  run one family of cases (pingpong, ipv6, cm, rsockets, perftest, fabric, capi,
#                capi-attach, kernel: goverbs built -tags ibverbs on rxe0 in the guest).
#   RSTREAM_DEFAULT=1 also runs rstream with its default sizes both ways (slow under TCG).
#   TIMEOUT=60   seconds each side may take.
#   The ipv6 family runs when the guest has an IPv6 address (the VM brought up with RXE_IPV6=1).
#   CAPI=1       also run Debian's programs on the host over goverbs' libibverbs.so.1 (capi/),
#                if the host has ibv_rc_pingpong and ib_write_bw (ibverbs-utils, perftest),
#                and (family capi-attach) over its C flavour and librdmacm.so.1 (rdmacm-utils).
#
# Needs root (ip netns exec). Traffic stays on the namespace's bridge: nothing leaves the host.
# The VM runs under TCG on machines without usable KVM: the transcripts' timings mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-docs/interop}
vm=${RXE_VM_DIR:-../shared/rxe-vm}
vm=$(cd "$vm" && pwd)
T=${TIMEOUT:-60}
ONLY=${ONLY:-}
# shellcheck source=/dev/null
. "$vm/config.sh"
NS=$RXE_NETNS H=$RXE_HOST_IP V=$(rxe_vm_ip "$RXE_VM")

if [ "$(id -u)" -ne 0 ]; then echo "interop.sh: needs root (ip netns exec)" >&2; exit 1; fi
guest() { "$vm/guest.sh" "$@"; }
if ! guest true </dev/null >/dev/null 2>&1; then
  if [ "${UP:-0}" = 1 ]; then
    "$vm/build.sh" && "$vm/up.sh"
  else
    echo "interop.sh: the rxe VM does not answer; start it ($vm/up.sh) or run with UP=1" >&2
    exit 1
  fi
fi
work=$(mktemp -d)
cleanup() { rm -rf "$work"; [ "${DOWN:-0}" = 1 ] && "$vm/down.sh" || true; }
trap cleanup EXIT
G=${GOVERBS:-}
if [ -z "$G" ]; then
  G=$work/goverbs
  go build -o "$G" ./cmd/goverbs
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[ -n "$(git status --porcelain -- '*.go' '*.c' '*.h' go.mod go.sum 2>/dev/null)" ] && commit="$commit (with uncommitted changes)"
when=$(date -u +%Y-%m-%dT%H:%MZ)

mkdir -p "$out/transcripts"
[ -n "$ONLY" ] || rm -f "$out"/transcripts/*.txt # a full run replaces the last one's
rows=$work/rows
: >"$rows"

# side SIDE CMD: run CMD on the host (in the namespace) or in the guest, under the timeout.
side() {
  local where=$1 cmd=$2
  if [ "$where" = host ]; then
    ip netns exec "$NS" timeout "$T" bash -c "$cmd" </dev/null
  else
    guest "timeout $T $cmd" </dev/null
  fi
}

# shown CMD: the command as a transcript shows it, without the temporary directory's name.
shown() { local c=${1//$G/goverbs}; echo "\$ ${c//$work/\$TMPDIR}"; }

# run ID TOOL ROLE TRANSPORT PEER DELAY SERVER-SIDE SERVER-CMD CLIENT-SIDE CLIENT-CMD: start the
# server, give it DELAY seconds, run the client, wait for both; write the transcript and a row.
run() {
  local id=$1 tool=$2 role=$3 transport=$4 peer=$5 delay=$6 sside=$7 scmd=$8 cside=$9 ccmd=${10}
  [ -z "$ONLY" ] || [ "$ONLY" = "$family" ] || return 0
  echo "== $id: $role" >&2
  side "$sside" "$scmd" >"$work/srv.out" 2>&1 &
  local sp=$! src=0 crc=0
  sleep "$delay"
  side "$cside" "$ccmd" >"$work/cli.out" 2>&1 || crc=$?
  wait "$sp" || src=$?
  local result=pass
  [ "$src" = 0 ] && [ "$crc" = 0 ] || result="FAIL (server exit $src, client exit $crc)"
  {
    echo "# $id: $tool, $role, $transport, peer $peer"
    echo "# $when, goverbs $commit; bench/interop.sh"
    echo
    echo "## server ($sside), exit status $src"
    shown "$scmd"
    cat "$work/srv.out"
    echo
    echo "## client ($cside), exit status $crc"
    shown "$ccmd"
    cat "$work/cli.out"
  } >"$out/transcripts/$id.txt"
  printf '| `%s` | %s | %s | %s | %s | [%s](transcripts/%s.txt) |\n' \
    "$tool" "$role" "$transport" "$peer" "$result" "$id" "$id" >>"$rows"
  echo "   $result" >&2
}

# Both roles of one case: goverbs serves, then the peer serves.
#   both ID TOOL TRANSPORT PEER GV-SERVER PEER-CLIENT PEER-SERVER GV-CLIENT [GUEST-SERVER-DELAY]
both() {
  local id=$1 tool=$2 transport=$3 peer=$4
  run "$id-gvserver" "$tool" "goverbs server" "$transport" "$peer" 1 host "$5" guest "$6"
  run "$id-gvclient" "$tool" "goverbs client" "$transport" "$peer" "${9:-3}" guest "$7" host "$8"
}

# Both roles of a tool whose client is its server's command plus the server's address
# (rdma-core's ping-pongs, perftest):
#   pair_case ID TOOL TRANSPORT PEER GOVERBS-CMD PEER-CMD GOVERBS-ADDR PEER-ADDR
pair_case() {
  both "$1" "$2" "$3" "$4" "$5" "$6 $7" "$6" "$5 $8"
}

g="$G"
rdmacore="rdma-core 44 (rxe)"
pt="perftest 4.5 (rxe)"
rdmacm="librdmacm 44 (rxe)"

family=pingpong
# rdma-core's examples: the rdma-core out-of-band exchange over TCP, the QP over RoCEv2.
pp() { # pp ID TOOL TRANSPORT ARGS
  pair_case "$1" "$2" "$3" "$rdmacore" "$g $2 --bind $H -g 0 $4" "ibv_$2 -d rxe0 -g 1 $4" "$H" "$V"
}
pp rc rc_pingpong RC ""
pp rc-big-c-e rc_pingpong RC "-s 10000 -n 200 -c -e"
pp uc uc_pingpong UC ""
pp uc-c uc_pingpong UC "-c"
pp ud ud_pingpong UD "-s 1024"
pp ud-c ud_pingpong UD "-s 1024 -c"
pp srq srq_pingpong "RC + SRQ" ""
pp srq-c srq_pingpong "RC + SRQ" "-c"

family=ipv6
# The same ping-pongs with the QPs over IPv6 (rxe0's GID index 2 is the guest's fd77:: address).
# rdma-core's servers listen for the exchange on IPv4 only, so a goverbs client reaches them at
# the guest's IPv4 address while its QP runs over IPv6.
H6=$RXE_HOST_IP6 V6=$(rxe_vm_ip6 "$RXE_VM")
if { [ -z "$ONLY" ] || [ "$ONLY" = ipv6 ]; } && guest "ip -6 -o addr show eth0 | grep -q ${V6%/*}/" </dev/null 2>/dev/null; then
  pp6() { # pp6 ID TOOL TRANSPORT ARGS
    pair_case "$1" "$2" "$3 over IPv6" "$rdmacore" "$g $2 --bind $H6 -g 0 $4" "ibv_$2 -d rxe0 -g 2 $4" "$H6" "$V"
  }
  pp6 rc6 rc_pingpong RC ""
  pp6 uc6 uc_pingpong UC ""
  pp6 ud6 ud_pingpong UD "-s 1024"
  pp6 srq6 srq_pingpong "RC + SRQ" ""
  both rping6 rping "RC, rdma_cm over IPv6" "$rdmacm" \
    "$g rping -s -a $H6 -V -C 10 -v" "rping -c -a $H6 -V -C 10 -v" \
    "rping -s -a $V6 -V -C 10" "$g rping -c -a $V6 -I $H6 -V -C 10 -v"
elif [ "$ONLY" = ipv6 ]; then
  echo "interop.sh: the guest has no IPv6 address: bring the VM up with RXE_IPV6=1" >&2
fi

family=cm
# librdmacm's examples: everything through the connection manager (MADs on QP1).
both rping rping "RC, rdma_cm" "$rdmacm" \
  "$g rping -s -a $H -V -C 10 -v" "rping -c -a $H -V -C 10 -v" \
  "rping -s -a $V -V -C 10" "$g rping -c -a $V -I $H -V -C 10 -v"
both ucmatose ucmatose "RC, rdma_cm" "$rdmacm" \
  "$g ucmatose -b $H" "ucmatose -s $H" \
  "ucmatose -b $V" "$g ucmatose -s $V -b $H"
both udaddy udaddy "UD, rdma_cm SIDR" "$rdmacm" \
  "$g udaddy -b $H" "udaddy -s $H" \
  "udaddy -b $V" "$g udaddy -s $V -b $H"
grp=239.77.0.9
run mckey-gvrecv mckey "goverbs receiver" "UD multicast" "$rdmacm" 2 \
  host "$g mckey -m $grp -b $H" guest "mckey -m $grp -b $V -s"
run mckey-gvsend mckey "goverbs sender" "UD multicast" "$rdmacm" 6 \
  guest "mckey -m $grp -b $V" host "$g mckey -m $grp -b $H -s"

family=rsockets
# librdmacm's rstream (rsockets) against goverbs rstream (rdmanet): rs_conn_data in the CM's
# private data, data and SGL updates by WRITE WITH IMMEDIATE, SHUTDOWN and DISCONNECT at the end.
# The default run (rstream's four sizes, 100000 64 B round trips first) takes minutes under TCG:
# give it TIMEOUT=900.
both rstream-64k rstream "rsockets (RC, rdma_cm)" "$rdmacm" \
  "$g rstream -b $H -S 65536 -C 1000" "rstream -s $H -S 65536 -C 1000" \
  "rstream -S 65536 -C 1000" "$g rstream -s $V -b $H -S 65536 -C 1000"
both rstream-verify rstream "rsockets (RC, rdma_cm)" "$rdmacm" \
  "$g rstream -b $H -S 100000 -C 50 -T v" "rstream -s $H -S 100000 -C 50 -T v" \
  "rstream -S 100000 -C 50 -T v" "$g rstream -s $V -b $H -S 100000 -C 50 -T v"
if [ "${RSTREAM_DEFAULT:-0}" = 1 ]; then
  both rstream-default rstream "rsockets (RC, rdma_cm)" "$rdmacm" \
    "$g rstream -b $H" "rstream -s $H" "rstream" "$g rstream -s $V -b $H"
fi

family=perftest
# perftest's tools: perftest's TCP exchange (or, with -R, its exchange over rdma_cm). perftest
# sends no test parameters: both sides get the same flags.
pf() { # pf ID TOOL TRANSPORT ARGS
  local a=$4 x="-x 1"
  case " $a " in *" -R "*) x= ;; esac # rdma_cm finds the GID from the address
  pair_case "$1" "$2" "$3" "$pt" "$g $2 --bind $H $a" "ib_$2 -d rxe0 $x $a" "$H" "$V"
}
pf write_bw write_bw RC "-n 100 -s 4096"
pf read_bw read_bw RC "-n 100 -s 4096"
pf atomic_bw atomic_bw RC "-n 100"
pf send_bw send_bw RC "-n 100 -s 4096"
pf send_bw-ud send_bw UD "-c UD -n 100 -s 1024"
pf write_bw-q4 write_bw "RC, 4 QPs" "-n 100 -s 1024 -q 4"
pf write_bw-b write_bw "RC, bidirectional" "-b -n 100 -s 4096"
pf send_lat send_lat RC "-n 100"
pf write_lat write_lat RC "-n 100"
pf read_lat read_lat RC "-n 100"
pf atomic_lat atomic_lat RC "-n 100"
pf write_bw-R write_bw "RC, rdma_cm (-R)" "-R -n 100 -s 4096"
pf send_lat-R send_lat "RC, rdma_cm (-R)" "-R -n 100"

family=fabric
# Congestion control and selective repeat on the goverbs side (issue 31): rxe ignores ECN
# marks and treats a CNP as an unknown packet, and a goverbs requester with selective repeat
# on runs go-back-N with a peer that never negotiated it; every case must still pass (--stats
# prints the counters: ECN-capable packets out, no CNP, no selective retransmit).
ccsr="--cc dcqcn --sr --stats"
fab() { # fab ID TOOL TRANSPORT GOVERBS-CMD PEER-CMD
  pair_case "$1" "$2" "$3, goverbs with $ccsr" "$4" "$5" "$6" "$H" "$V"
}
fab rc-ccsr rc_pingpong RC "$rdmacore" "$g rc_pingpong --bind $H -g 0 $ccsr" "ibv_rc_pingpong -d rxe0 -g 1"
fab rc-big-ccsr rc_pingpong RC "$rdmacore" "$g rc_pingpong --bind $H -g 0 -s 10000 -n 200 $ccsr" "ibv_rc_pingpong -d rxe0 -g 1 -s 10000 -n 200"
fab write_bw-ccsr write_bw RC "$pt" "$g write_bw --bind $H -n 2000 -s 65536 $ccsr" "ib_write_bw -d rxe0 -x 1 -n 2000 -s 65536"
fab read_bw-ccsr read_bw RC "$pt" "$g read_bw --bind $H -n 500 -s 65536 $ccsr" "ib_read_bw -d rxe0 -x 1 -n 500 -s 65536"

family=capi
# Debian's own programs on the host over goverbs' libibverbs.so.1 against the same programs on
# rxe0: real rdma-core and perftest on both ends, goverbs' engine under one of them.
if [ "${CAPI:-0}" = 1 ] && { [ -z "$ONLY" ] || [ "$ONLY" = capi ]; }; then
  if command -v ibv_rc_pingpong >/dev/null && command -v ib_write_bw >/dev/null &&
    bash capi/build.sh "$work/lib" >/dev/null; then
    c="env LD_LIBRARY_PATH=$work/lib GOVERBS_DEVICES=sw0=$H"
    cp="C library (capi) vs rdma-core 44 (rxe)"
    pair_case capi-rc ibv_rc_pingpong RC "$cp" "$c ibv_rc_pingpong -d sw0 -g 0" "ibv_rc_pingpong -d rxe0 -g 1" "$H" "$V"
    pair_case capi-rc-e ibv_rc_pingpong RC "$cp" "$c ibv_rc_pingpong -d sw0 -g 0 -e" "ibv_rc_pingpong -d rxe0 -g 1 -e" "$H" "$V"
    pair_case capi-ud ibv_ud_pingpong UD "$cp" "$c ibv_ud_pingpong -d sw0 -g 0 -s 1024" "ibv_ud_pingpong -d rxe0 -g 1 -s 1024" "$H" "$V"
    pair_case capi-srq ibv_srq_pingpong "RC + SRQ" "$cp" "$c ibv_srq_pingpong -d sw0 -g 0" "ibv_srq_pingpong -d rxe0 -g 1" "$H" "$V"
    cpt="C library (capi) vs perftest 4.5 (rxe)"
    for t in write_bw read_bw send_bw atomic_bw send_lat; do
      a="-n 100"; case $t in *_bw) [ $t = atomic_bw ] || a="-n 100 -s 4096" ;; esac
      pair_case "capi-$t" "ib_$t" RC "$cpt" "$c ib_$t -d sw0 -x 0 $a" "ib_$t -d rxe0 -x 1 $a" "$H" "$V"
    done
  else
    echo "interop.sh: CAPI=1 needs ibv_rc_pingpong and ib_write_bw on the host and capi/build.sh to work; skipped" >&2
  fi
fi

family=capi-attach
# The C flavour (capi/build.sh -attach: no Go runtime in the program, the device in a
# goverbs serve the library starts by itself) and its librdmacm.so.1, with Debian's
# rdma-core, librdmacm and perftest programs on both ends.
if [ "${CAPI:-0}" = 1 ] && { [ -z "$ONLY" ] || [ "$ONLY" = capi-attach ]; }; then
  if command -v rping >/dev/null && command -v ib_write_bw >/dev/null &&
    bash capi/build.sh -attach "$work/alib" >/dev/null && [ -e "$work/alib/librdmacm.so.1" ]; then
    mkdir -m 700 -p "$work/run"
    a="env LD_LIBRARY_PATH=$work/alib XDG_RUNTIME_DIR=$work/run GOVERBS_DEVICES=sw0=$H"
    ap="C flavour attached (capi -attach) vs rdma-core 44 (rxe)"
    pair_case attach-rc ibv_rc_pingpong RC "$ap" "$a ibv_rc_pingpong -d sw0 -g 0" "ibv_rc_pingpong -d rxe0 -g 1" "$H" "$V"
    pair_case attach-write_bw ib_write_bw RC "C flavour attached vs perftest 4.5 (rxe)" "$a ib_write_bw -d sw0 -x 0 -n 100 -s 4096" "ib_write_bw -d rxe0 -x 1 -n 100 -s 4096" "$H" "$V"
    am="librdmacm.so.1 on the C flavour vs librdmacm 44 (rxe)"
    both attach-rping rping "RC, rdma_cm" "$am" \
      "$a rping -s -a $H -V -C 10 -v" "rping -c -a $H -V -C 10 -v" \
      "rping -s -a $V -V -C 10" "$a rping -c -a $V -I $H -V -C 10 -v"
    both attach-ucmatose ucmatose "RC, rdma_cm" "$am" \
      "$a ucmatose -b $H" "ucmatose -s $H" \
      "ucmatose -b $V" "$a ucmatose -s $V -b $H"
    both attach-udaddy udaddy "UD, rdma_cm SIDR" "$am" \
      "$a udaddy -b $H" "udaddy -s $H" \
      "udaddy -b $V" "$a udaddy -s $V -b $H"
    both attach-write_bw-R ib_write_bw "RC, rdma_cm (-R)" "$am" \
      "$a ib_write_bw -d sw0 -R -n 100 -s 4096" "ib_write_bw -d rxe0 -R -n 100 -s 4096 $H" \
      "ib_write_bw -d rxe0 -R -n 100 -s 4096" "$a ib_write_bw -d sw0 -R -n 100 -s 4096 $V" 10
    both attach-rstream rstream "rsockets (RC, rdma_cm)" "librdmacm.so.1's rsockets vs librdmacm 44 (rxe)" \
      "$a rstream -b $H -S 65536 -C 100 -T v" "rstream -s $H -S 65536 -C 100 -T v" \
      "rstream -S 65536 -C 100 -T v" "$a rstream -s $V -b $H -S 65536 -C 100 -T v"
  else
    echo "interop.sh: CAPI=1 capi-attach needs rping, ib_write_bw and librdmacm-dev on the host; skipped" >&2
  fi
fi

family=kernel
# goverbs built with -tags ibverbs in the guest, on rxe0 itself: package cm through the
# kernel's rdma_cm (librdmacm 44), rdmanet (goverbs rstream) through the same, against
# librdmacm's tools and against itself; both sides in the guest, rxe looping rxe0 back to
# itself (docs/guide/cm-kernel.md). The host's goverbs is not in these cases.
if [ -z "$ONLY" ] || [ "$ONLY" = kernel ]; then
  if CGO_ENABLED=1 go build -tags ibverbs -o "$work/goverbs-ib" ./cmd/goverbs &&
    guest 'cat > /tmp/goverbs-ib && chmod +x /tmp/goverbs-ib' <"$work/goverbs-ib"; then
    k=/tmp/goverbs-ib kp="librdmacm 44 on rxe0 (both in the guest)" ks="goverbs -tags ibverbs on rxe0 (both)"
    kboth() { # kboth ID TOOL TRANSPORT GV-SERVER PEER-CLIENT PEER-SERVER GV-CLIENT GV-CLIENT-TO-GV
      run "kernel-$1-gvserver" "$2" "goverbs server (ibverbs)" "$3" "$kp" 2 guest "$4" guest "$5"
      run "kernel-$1-gvclient" "$2" "goverbs client (ibverbs)" "$3" "$kp" 3 guest "$6" guest "$7"
      run "kernel-$1-gvboth" "$2" "goverbs both (ibverbs)" "$3" "$ks" 2 guest "$4" guest "$8"
    }
    kboth rping rping "RC, rdma_cm" \
      "$k rping -s -a $V -V -C 10 -v" "rping -c -a $V -V -C 10 -v" \
      "rping -s -a $V -V -C 10" "$k rping -c -a $V -V -C 10 -v" "$k rping -c -a $V -V -C 10 -v"
    kboth ucmatose ucmatose "RC, rdma_cm" \
      "$k ucmatose -b $V -c 2" "ucmatose -s $V -c 2" \
      "ucmatose -b $V -c 2" "$k ucmatose -s $V -b $V -c 2" "$k ucmatose -s $V -b $V -c 2"
    kboth udaddy udaddy "UD, rdma_cm SIDR" \
      "$k udaddy -b $V" "udaddy -s $V" \
      "udaddy -b $V" "$k udaddy -s $V -b $V" "$k udaddy -s $V -b $V"
    kgrp=239.77.0.11
    run kernel-mckey-gvrecv mckey "goverbs receiver (ibverbs)" "UD multicast" "$kp" 2 \
      guest "$k mckey -m $kgrp -b $V" guest "mckey -m $kgrp -b $V -s"
    run kernel-mckey-gvsend mckey "goverbs sender (ibverbs)" "UD multicast" "$kp" 4 \
      guest "mckey -m $kgrp -b $V" guest "$k mckey -m $kgrp -b $V -s"
    kboth write_bw-R ib_write_bw "RC, rdma_cm (-R)" \
      "$k write_bw -d rxe0 -R -n 200 -s 4096" "ib_write_bw -d rxe0 -R -n 200 -s 4096 $V" \
      "ib_write_bw -d rxe0 -R -n 200 -s 4096" "$k write_bw -d rxe0 -R -n 200 -s 4096 $V" "$k write_bw -d rxe0 -R -n 200 -s 4096 $V"
    kboth send_lat-R ib_send_lat "RC, rdma_cm (-R)" \
      "$k send_lat -d rxe0 -R -n 200" "ib_send_lat -d rxe0 -R -n 200 $V" \
      "ib_send_lat -d rxe0 -R -n 200" "$k send_lat -d rxe0 -R -n 200 $V" "$k send_lat -d rxe0 -R -n 200 $V"
    kboth rstream rstream "rsockets (RC, rdma_cm): rdmanet" \
      "$k rstream -b $V -S 65536 -C 100 -T v" "rstream -s $V -S 65536 -C 100 -T v" \
      "rstream -b $V -S 65536 -C 100 -T v" "$k rstream -s $V -b $V -S 65536 -C 100 -T v" "$k rstream -s $V -b $V -S 65536 -C 100 -T v"
  else
    echo "interop.sh: family kernel needs cgo, libibverbs-dev and librdmacm-dev on the host; skipped" >&2
  fi
fi

kernel=$(guest 'uname -r' </dev/null 2>/dev/null || echo '?')
pass=$(grep -c '| pass |' "$rows" || true)
total=$(wc -l <"$rows")
{
  echo "# Interoperability matrix: the last run of bench/interop.sh"
  echo
  echo "Written by \`bench/interop.sh\`; do not edit. $when, goverbs $commit, against the rxe VM"
  echo "(\`../shared/rxe-vm\`: guest kernel $kernel, rdma_rxe, rdma-core 44, perftest 4.5),"
  echo "goverbs on the host in namespace \`$NS\` bound to $H, the peer in the guest on rxe0 at $V."
  echo "A case passes when both sides exit 0. $pass of $total passed."
  echo
  echo "| tool | role | transport | peer | result | transcript |"
  echo "|---|---|---|---|---|---|"
  cat "$rows"
} >"$out/matrix.md"
echo "interop.sh: $pass of $total passed; $out/matrix.md" >&2
[ "$pass" = "$total" ]
