#!/usr/bin/env bash
# bench/pgo.sh: remake the CPU profile that goverbs' commands are built with
# (profile-guided optimization, https://go.dev/doc/pgo). `go build` and `go install` of a
# main package use the default.pgo beside it by themselves (-pgo=auto), so the goverbs
# command (cmd/goverbs: the tools and `goverbs serve`) and the C drop-in (capi, built
# by capi/build.sh) get it with no flag; a Go program of your own that imports verbs
# gets it by copying cmd/goverbs/default.pgo beside its main package, or by profiling
# its own work.
#
# The profile is what the data path does in the workloads users run, each for a few
# seconds between two processes on loopback with GOVERBS_CPUPROFILE on both sides:
# busy-poll and completion-channel latency, the 8 B message rate and 64 KiB bandwidth,
# through the same-host rings and over UDP, rdmanet's stream and request/response, and
# tools attached to `goverbs serve` (its loop). The profiles are merged into one.
#
#   bench/pgo.sh            # writes cmd/goverbs/default.pgo and capi/default.pgo
#
# Remake it when the data path changes shape (functions renamed, split or merged: PGO
# matches them by name, and a stale profile only stops helping; it cannot make a build
# wrong). Run it alone on the machine. The commit that changes default.pgo gives the
# same-run A/B of the build with and without it (bench/pgoab.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
serve_pid=
cleanup() {
	[ -z "$serve_pid" ] || { kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; } || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Built without a profile: the profile describes the code, not a previous profile's
# inlining decisions.
go build -pgo=off -o "$work/goverbs" ./cmd/goverbs
g=$work/goverbs
mkdir -m 700 "$work/run"
export XDG_RUNTIME_DIR=$work/run
S=127.53.0.2 C=127.53.0.3
i=0

# pair ENV -- SERVER-ARGS -- CLIENT-ARGS: one server/client run, each side profiled.
pair() {
	local env=() sargs=() cargs=()
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	while [ "$1" != -- ]; do sargs+=("$1"); shift; done
	shift
	cargs=("$@")
	i=$((i + 1))
	env "${env[@]}" GOVERBS_CPUPROFILE="$work/$i-s.prof" "$g" "${sargs[@]}" >"$work/srv.out" 2>&1 &
	local spid=$!
	sleep 0.3
	if ! env "${env[@]}" GOVERBS_CPUPROFILE="$work/$i-c.prof" "$g" "${cargs[@]}" >"$work/cli.out" 2>&1 || ! wait "$spid"; then
		kill "$spid" 2>/dev/null || true
		echo "bench/pgo.sh: ${env[*]} ${cargs[*]} failed:" >&2
		cat "$work/cli.out" "$work/srv.out" >&2
		exit 1
	fi
}

for shm in 1 0; do
	e=(GOVERBS_SHM=$shm)
	pair "${e[@]}" -- send_lat --bind $S -s 8 -n 20000 --busy-poll -- send_lat --bind $C -s 8 -n 20000 --busy-poll $S
	pair "${e[@]}" -- send_lat --bind $S -s 8 -n 20000 -e -- send_lat --bind $C -s 8 -n 20000 -e $S
	pair "${e[@]}" -- write_bw --bind $S --busy-poll -- write_bw --bind $C -s 8 -D 2 --busy-poll $S
	pair "${e[@]}" -- write_bw --bind $S -- write_bw --bind $C -s 8 -D 2 $S
	pair "${e[@]}" -- write_bw --bind $S -- write_bw --bind $C -s 65536 -D 2 $S
	pair "${e[@]}" -- rstream -b $S -S 65536 -C 4000 -- rstream -b $C -s $S -S 65536 -C 4000
	pair "${e[@]}" -- rstream -b $S -S 64 -C 20000 -- rstream -b $C -s $S -S 64 -C 20000
done

# Tools attached to one goverbs serve: its loop carries both devices' traffic.
GOVERBS_CPUPROFILE="$work/serve.prof" "$g" serve "p0=$S,p1=$C" >/dev/null 2>&1 &
serve_pid=$!
sleep 0.5
pair GOVERBS_ATTACH=1 -- write_bw --bind $S -- write_bw --bind $C -s 65536 -D 2 $S
pair GOVERBS_ATTACH=1 -- send_lat --bind $S -s 8 -n 20000 -- send_lat --bind $C -s 8 -n 20000 $S
kill -INT "$serve_pid"
wait "$serve_pid" || true
serve_pid=

go tool pprof -proto "$work"/*.prof >"$work/merged.pgo" 2>/dev/null
cp "$work/merged.pgo" cmd/goverbs/default.pgo
cp "$work/merged.pgo" capi/default.pgo
echo "bench/pgo.sh: $(ls "$work"/*.prof | wc -l) profiles merged into cmd/goverbs/default.pgo and capi/default.pgo ($(stat -c %s "$work/merged.pgo") bytes)"
