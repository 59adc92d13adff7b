#!/usr/bin/env bash
# build.sh DIR: build goverbs' drop-in libibverbs.so.1 into DIR.
#
#   bash capi/build.sh /tmp/gv && LD_LIBRARY_PATH=/tmp/gv ibv_devinfo -v
#
# Needs cgo (a C compiler) and rdma-core's headers (Debian: libibverbs-dev): the struct
# layouts come from the installed <infiniband/verbs.h>.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash capi/build.sh DIR   (builds DIR/libibverbs.so.1)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)/libibverbs.so.1
if ! echo '#include <infiniband/verbs.h>' | ${CC:-cc} -E -x c - >/dev/null 2>&1; then
  echo "capi/build.sh: <infiniband/verbs.h> not found; install libibverbs-dev (rdma-core's headers)" >&2
  exit 1
fi
cd "$here"
# One -extldflags only: a second replaces the first.
CGO_ENABLED=1 go build -tags goverbs_capi -buildmode=c-shared -trimpath \
  -ldflags "-s -extldflags '-Wl,--version-script=$here/libibverbs.map -Wl,-soname,libibverbs.so.1'" \
  -o "$out" .
rm -f "${out%.so.1}.h" # cgo's header of the gv_* exports: internal, not an API
echo "$out"
