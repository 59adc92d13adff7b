package capitest

// libfabric's verbs provider (Debian's libfabric-bin 1.17) and UCX (ucx-utils 1.13) on the
// drop-in libraries. Both look for more than libibverbs gives: libfabric offers
// connected (FI_EP_MSG) endpoints only on a device with an address on a network
// interface that is not the loopback (vrb_getifaddrs skips IFF_LOOPBACK), and UCX opens
// a device only when /dev/infiniband/<dev_name> is a character device it may read and
// write (uct_ib_device_is_accessible). So the pairs run in namespaces of their own
// (fabricNS): a veth pair with 10.0.0.2 and 10.0.0.3, and /dev on a tmpfs with the
// host's entries bound back (its symbolic links made again) and /dev/null bound as
// /dev/infiniband/uverbs0 and 1 (the goverbs devices' dev_name). docs/guide/capi.md,
// "libfabric and UCX", has the whole story, and what does not run.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLibfabricInfo: fi_info -p verbs lists a software device of the Go flavour on a
// loopback address: its datagram domain (FI_EP_DGRAM, and RDM through ofi_rxd). Its
// connected endpoints need an address off the loopback and the C flavour's librdmacm
// (TestLibfabricUCX).
func TestLibfabricInfo(t *testing.T) {
	fi := program(t, "fi_info")
	lib := library(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, fi, "-p", "verbs")
	c.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "GOVERBS_DEVICES=sw7="+newAddr())
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("fi_info -p verbs: %v\n%s", err, out)
	}
	for _, want := range []string{"provider: verbs\n", "domain: sw7-dgram\n", "type: FI_EP_DGRAM\n", "protocol: FI_PROTO_IB_UD\n"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("fi_info -p verbs lacks %q:\n%s", want, out)
		}
	}
}

// TestLibfabricUCX runs, on the C flavour and its librdmacm, in namespaces of their own
// (fabricNS), each pair as two processes on two devices (10.0.0.2 and 10.0.0.3, a daemon
// each, started by the library): fi_info -p verbs (connected and datagram domains of
// both devices), fi_pingpong -p verbs -e msg, fi_pingpong -p "verbs;ofi_rxm" -e rdm (with
// FI_UNIVERSE_SIZE=16: rxm sizes its CQ for 1024 peers, over the device's 32767 CQEs),
// fi_pingpong -p verbs -e dgram (with FI_VERBS_DGRAM_USE_NAME_SERVER=0: the name server
// is a thread of libfabric's, and a program of several threads may not register
// fi_pingpong's buffer, not whole pages, on the C flavour),
// ucx_info -d (the device's memory domain, rc_verbs and ud_verbs), and ucx_perftest: UCT
// active messages over rc_verbs and ud_verbs, UCP tag matching (latency, and 1 MiB
// bandwidth) over rc_verbs with ud_verbs for wire-up. UCX 1.13's ud_verbs drops every
// datagram on a RoCE device that does not put mlx5's packet type in the completion's sl
// (rxe does not either), so the UD runs set UCX_UD_ETH_DGID_CHECK=n. UCX needs no
// librdmacm for these, so UCP's tag latency runs on the Go flavour too. Each must exit 0
// with its figures.
func TestLibfabricUCX(t *testing.T) {
	lib, golib := attachLibrary(t), library(t)
	if _, err := os.Stat(filepath.Join(lib, "librdmacm.so.1")); err != nil {
		t.Skip("librdmacm.so.1 was not built (no <rdma/rdma_cma.h>: apt-get install librdmacm-dev)")
	}
	var fabric, ucx bool
	if _, err := exec.LookPath("fi_pingpong"); err == nil {
		_, err2 := exec.LookPath("fi_info")
		fabric = err2 == nil
	}
	if _, err := exec.LookPath("ucx_perftest"); err == nil {
		_, err2 := exec.LookPath("ucx_info")
		ucx = err2 == nil
	}
	if !fabric && !ucx {
		t.Skip("neither libfabric-bin nor ucx-utils is installed")
	}
	if out, err := exec.Command("unshare", "-Urnm", "--pid", "--fork", "sh", "-c",
		"ip link add gv0 type veth peer name gv1").CombinedOutput(); err != nil {
		t.Skipf("no user, network and mount namespaces with veth here: %v %s", err, out)
	}
	top := t.TempDir()
	script := filepath.Join(top, "ns.sh")
	if err := os.WriteFile(script, []byte(fabricNS), 0o755); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(top, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "unshare", "-Urnm", "--pid", "--fork", "--kill-child", "sh", script)
	c.Env = append(os.Environ(), "GV_LIB="+lib, "GV_GOLIB="+golib, "GV_OUT="+outDir)
	if fabric {
		c.Env = append(c.Env, "GV_FABRIC=1")
	}
	if ucx {
		c.Env = append(c.Env, "GV_UCX=1")
	}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("namespace: %v\n%s", err, out)
	}
	// step is what a step of fabricNS left: its output, and that it exited 0.
	step := func(t *testing.T, name string) string {
		t.Helper()
		if crash, err := os.ReadFile(filepath.Join(outDir, name+".crash")); err == nil {
			t.Logf("%s crashed in libfabric after a complete run, and ran again (fabricNS's pair):\n%s", name, crash)
		}
		out, _ := os.ReadFile(filepath.Join(outDir, name+".log"))
		rc, err := os.ReadFile(filepath.Join(outDir, name+".rc"))
		if err != nil || strings.TrimSpace(string(rc)) != "0" {
			t.Fatalf("%s: exit %q (%v):\n%s", name, strings.TrimSpace(string(rc)), err, out)
		}
		return string(out)
	}
	// pingpong: fi_pingpong's table, its last row the 1 MiB one, every row all acked.
	pingpong := regexp.MustCompile(`(?m)^1m\s+10\s+=10\s`)
	pingpongDgram := regexp.MustCompile(`(?m)^1k\s+10\s+=10\s`) // the MTU bounds its sizes
	final := regexp.MustCompile(`(?m)^Final:\s+\d+\s`)
	t.Run("fi_info", func(t *testing.T) {
		if !fabric {
			t.Skip("libfabric-bin not installed")
		}
		out := step(t, "fi_info")
		for _, want := range []string{"domain: s0\n", "domain: c0\n", "type: FI_EP_MSG\n",
			"protocol: FI_PROTO_RDMA_CM_IB_RC\n", "domain: s0-dgram\n", "type: FI_EP_DGRAM\n"} {
			if !strings.Contains(out, want) {
				t.Fatalf("fi_info -p verbs lacks %q:\n%s", want, out)
			}
		}
	})
	for _, name := range []string{"fi_msg", "fi_rdm", "fi_dgram"} {
		t.Run(name, func(t *testing.T) {
			if !fabric {
				t.Skip("libfabric-bin not installed")
			}
			last := pingpong
			if name == "fi_dgram" {
				last = pingpongDgram
			}
			for _, side := range []string{name + "_server", name + "_client"} {
				if out := step(t, side); !last.MatchString(out) {
					t.Fatalf("%s: no last row with 10 acked:\n%s", side, out)
				}
			}
		})
	}
	t.Run("ucx_info", func(t *testing.T) {
		if !ucx {
			t.Skip("ucx-utils not installed")
		}
		out := step(t, "ucx_info")
		for _, want := range []string{"# Memory domain: sw0\n", "#      Transport: rc_verbs\n",
			"#      Transport: ud_verbs\n", "#         Device: sw0:1\n"} {
			if !strings.Contains(out, want) {
				t.Fatalf("ucx_info -d lacks %q:\n%s", want, out)
			}
		}
	})
	for _, name := range []string{"uct_rc_am_lat", "uct_ud_am_lat", "ucp_tag_lat", "ucp_tag_bw", "go_ucp_tag_lat"} {
		t.Run(name, func(t *testing.T) {
			if !ucx {
				t.Skip("ucx-utils not installed")
			}
			step(t, name+"_server")
			if out := step(t, name+"_client"); !final.MatchString(out) {
				t.Fatalf("%s: no Final row:\n%s", name, out)
			}
		})
	}
}

// fabricNS runs in the namespaces (TestLibfabricUCX): lo up, a veth pair with 10.0.0.2
// and 10.0.0.3 (and 10.0.0.4 and 10.0.0.5 for the Go flavour), /dev on a tmpfs with /dev/infiniband/uverbs0 and 1 (/dev/null bound
// there), then each step with the libraries in GV_LIB, its output in GV_OUT/NAME.log
// and its exit status in GV_OUT/NAME.rc (go_*: the Go flavour's, in GV_GOLIB). The C
// flavour starts a daemon for each address.
const fabricNS = `set -e
ip link set lo up
ip link add gv0 type veth peer name gv1
ip addr add 10.0.0.2/24 dev gv0
ip addr add 10.0.0.3/24 dev gv1
ip addr add 10.0.0.4/24 dev gv0
ip addr add 10.0.0.5/24 dev gv1
ip link set gv0 up
ip link set gv1 up
keep=$(mktemp -d)
mount --rbind /dev "$keep"
mount -t tmpfs goverbs /dev
for e in "$keep"/*; do
	n=$(basename "$e")
	if [ -L "$e" ]; then
		ln -s "$(readlink "$e")" "/dev/$n"
		continue
	fi
	if [ -d "$e" ]; then mkdir "/dev/$n"; else touch "/dev/$n"; fi
	mount --rbind "$e" "/dev/$n"
done
mkdir /dev/infiniband
for n in 0 1; do
	touch /dev/infiniband/uverbs$n
	mount --bind "$keep/null" /dev/infiniband/uverbs$n
done
set +e
export XDG_RUNTIME_DIR=$(mktemp -d) LD_LIBRARY_PATH="$GV_LIB"
# run NAME CMD...: CMD's output in NAME.log, its status in NAME.rc
run() {
	name=$1
	shift
	timeout 60 "$@" >"$GV_OUT/$name.log" 2>&1
	echo $? >"$GV_OUT/$name.rc"
}
# listening PORT: wait until a TCP socket listens on PORT (60 s at most)
listening() {
	hex=$(printf ':%04X ' "$1")
	i=0
	until grep -q "$hex.* 0A " /proc/net/tcp; do
		i=$((i + 1))
		[ $i -gt 600 ] && return 1
		sleep 0.1
	done
}
# pair NAME PORT SERVERENV CLIENTENV ARGS...: fi_pingpong's server and client on
# control port PORT (one per run: a port left in TIME_WAIT is not bound again), ARGS to
# both
#
# Once, a run one of whose sides printed its whole table and then died of SIGSEGV inside
# libfabric while closing (fi_rdm: ofi_rxm calling through a closed endpoint's ops,
# 1.17.0's code, about one CI run in ten, the client's, and once the server's
# (2026-11-28); not understood, see the test's log) goes again on the next port; the
# first run's log of the side that crashed is kept as NAME_client.crash or
# NAME_server.crash.
pair() {
	pn=$1 port=$2 senv=$3 cenv=$4
	shift 4 # pn, not name: run sets name
	for try in 1 2; do
		(run ${pn}_server env $senv fi_pingpong -B $port "$@") &
		srv=$!
		listening $port
		run ${pn}_client env $cenv fi_pingpong -P $port "$@" 10.0.0.2
		wait $srv
		[ $try = 1 ] || break
		again=
		for side in ${pn}_client ${pn}_server; do
			if crashedAfterTable $side; then
				mv "$GV_OUT/$side.log" "$GV_OUT/$side.crash"
				again=1
			fi
		done
		[ -n "$again" ] || break
		port=$((port + 10))
	done
}
# crashedAfterTable SIDE: SIDE of a pair exited non-zero, of SIGSEGV, after its last row
# (every size, all acked).
crashedAfterTable() {
	[ "$(cat "$GV_OUT/$1.rc")" != 0 ] &&
		grep -q 'terminated with signal 11' "$GV_OUT/$1.log" &&
		grep -Eq '^(1m|1k) +10 +=10 ' "$GV_OUT/$1.log"
}
if [ -n "$GV_FABRIC" ]; then
	run fi_info env GOVERBS_DEVICES=s0=10.0.0.2,c0=10.0.0.3 fi_info -p verbs
	pair fi_msg 47592 GOVERBS_DEVICES=s0=10.0.0.2 GOVERBS_DEVICES=c0=10.0.0.3 -p verbs -e msg -I 10
	pair fi_rdm 47593 "GOVERBS_DEVICES=s0=10.0.0.2 FI_UNIVERSE_SIZE=16" \
		"GOVERBS_DEVICES=c0=10.0.0.3 FI_UNIVERSE_SIZE=16" -p "verbs;ofi_rxm" -e rdm -I 10
	pair fi_dgram 47594 "GOVERBS_DEVICES=s0=10.0.0.2 FI_VERBS_DGRAM_USE_NAME_SERVER=0" \
		"GOVERBS_DEVICES=c0=10.0.0.3 FI_VERBS_DGRAM_USE_NAME_SERVER=0" -p verbs -e dgram -I 10
fi
if [ -n "$GV_UCX" ]; then
	s=GOVERBS_DEVICES=sw0=10.0.0.2 c=GOVERBS_DEVICES=sw0=10.0.0.3
	run ucx_info env $s ucx_info -d
	# perf NAME PORT ENV ARGS...: ucx_perftest's server (on $sa, device $s) and client
	# (device $c); the server takes the test from its client, so ARGS are the client's
	sa=10.0.0.2
	perf() {
		name=$1 port=$2 env=$3
		shift 3
		(run ${name}_server env $s $env ucx_perftest -p $port) &
		srv=$!
		listening $port
		run ${name}_client env $c $env ucx_perftest $sa -p $port "$@"
		wait $srv
	}
	perf uct_rc_am_lat 13377 "" -d sw0:1 -x rc_verbs -t am_lat -n 1000
	perf uct_ud_am_lat 13378 UCX_UD_ETH_DGID_CHECK=n -d sw0:1 -x ud_verbs -t am_lat -n 1000
	ucp="UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=sw0:1 UCX_UD_ETH_DGID_CHECK=n"
	perf ucp_tag_lat 13379 "$ucp" -t tag_lat -n 1000
	perf ucp_tag_bw 13380 "$ucp" -t tag_bw -s 1048576 -n 20
	# the Go flavour's devices open their own sockets: addresses no daemon holds
	s=GOVERBS_DEVICES=sw0=10.0.0.4 c=GOVERBS_DEVICES=sw0=10.0.0.5 sa=10.0.0.4
	perf go_ucp_tag_lat 13381 "LD_LIBRARY_PATH=$GV_GOLIB $ucp" -t tag_lat -n 1000
fi
`
