#!/usr/bin/env bash
# build.sh [-attach] DIR: build goverbs' drop-in libibverbs.so.1 into DIR.
#
#   bash capi/build.sh /tmp/gv && LD_LIBRARY_PATH=/tmp/gv ibv_devinfo -v
#
# The default flavour runs the software device inside each C process (the Go runtime
# comes with it: go build -buildmode=c-shared); it needs cgo.
#
# -attach builds the C flavour: the same C ABI layer with every device attached to a
# `goverbs serve` daemon (docs/attach-protocol.md), plain C with no Go runtime in the
# program, so fork() works. It also builds the goverbs program into DIR, where the
# library finds it to start a daemon when none serves a device (see
# docs/guide/shared-device.md):
#
#   bash capi/build.sh -attach /tmp/gva &&
#     LD_LIBRARY_PATH=/tmp/gva GOVERBS_DEVICES=sw0=127.0.0.2 ibv_rc_pingpong -g 0
#
# Both need a C compiler and rdma-core's headers (Debian: libibverbs-dev): the struct
# layouts come from the installed <infiniband/verbs.h>.
set -euo pipefail
attach=0
if [ $# -ge 1 ] && [ "$1" = "-attach" ]; then
  attach=1
  shift
fi
if [ $# -ne 1 ]; then
  echo "usage: bash capi/build.sh [-attach] DIR   (builds DIR/libibverbs.so.1; -attach: the C flavour, and DIR/goverbs)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)/libibverbs.so.1
cc=${CC:-cc}
if ! echo '#include <infiniband/verbs.h>' | $cc -E -x c - >/dev/null 2>&1; then
  echo "capi/build.sh: <infiniband/verbs.h> not found; install libibverbs-dev (rdma-core's headers)" >&2
  exit 1
fi
cd "$here"
if [ $attach = 1 ]; then
  # capi/inline.c stages inline bytes per call, which the attached data path cannot use:
  # attach/gva_inline.c replaces it.
  $cc -shared -fPIC -O2 -Wall -D_GNU_SOURCE -DGOVERBS_ATTACH \
    -fvisibility=default -o "$out" \
    device.c objects.c qp.c misc.c private.c xrc.c attach/*.c \
    -Wl,--version-script="$here/libibverbs.map" -Wl,-soname,libibverbs.so.1 -Wl,-z,defs -lpthread -ldl
  # librdmacm.so.1 beside it (capi/rdmacm): plain C over the daemon's rdma_cm service,
  # reaching the context's daemon connection through GOVERBS_PRIVATE_1.
  if echo '#include <rdma/rdma_cma.h>' | $cc -E -x c - >/dev/null 2>&1; then
    $cc -shared -fPIC -O2 -Wall -D_GNU_SOURCE -fvisibility=default \
      -o "$(dirname "$out")/librdmacm.so.1" rdmacm/*.c \
      -Wl,--version-script="$here/rdmacm/librdmacm.map" -Wl,-soname,librdmacm.so.1 -Wl,-z,defs \
      -L"$(dirname "$out")" -l:libibverbs.so.1 -lpthread
  else
    echo "capi/build.sh: <rdma/rdma_cma.h> not found (librdmacm-dev): librdmacm.so.1 not built" >&2
  fi
  CGO_ENABLED=0 go build -trimpath -o "$(dirname "$out")/goverbs" ../cmd/goverbs
  echo "$out"
  exit 0
fi
# One -extldflags only: a second replaces the first.
CGO_ENABLED=1 go build -tags goverbs_capi -buildmode=c-shared -trimpath \
  -ldflags "-s -extldflags '-Wl,--version-script=$here/libibverbs.map -Wl,-soname,libibverbs.so.1'" \
  -o "$out" .
rm -f "${out%.1}.h" # cgo's header of the gv_* exports (libibverbs.so.h): internal, not an API
echo "$out"
