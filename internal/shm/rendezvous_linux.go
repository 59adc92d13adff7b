package shm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPermission is returned for a rendezvous directory or peer that is not this user's
// alone.
var ErrPermission = errors.New("shm: rendezvous not private to this user")

// EnsureDir creates dir (mode 0700) if it does not exist and checks that it is a
// directory (not a symbolic link) that this user owns and nobody else can enter: in a
// shared TMPDIR another user could otherwise have made it first and listen in it.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	return checkDir(dir)
}

func checkDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return fmt.Errorf("%w: %s (mode %o, uid %d)", ErrPermission, dir, st.Mode&0o7777, st.Uid)
	}
	return nil
}

// Listener is a rendezvous socket: a SOCK_SEQPACKET unix socket (one message per
// read, so a peer cannot desynchronise the framing) that accepts only peers of this
// user (SO_PEERCRED).
type Listener struct {
	l *net.UnixListener
}

// Listen creates the rendezvous socket at path, in a directory EnsureDir accepts. A
// socket file left by a process that died (nobody answers on it) is replaced; a live
// one is an error (another process serves that name).
func Listen(path string) (*Listener, error) {
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("shm: %s: %w", path, unix.EADDRINUSE)
	}
	os.Remove(path)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	l.SetUnlinkOnClose(true)
	return &Listener{l: l}, nil
}

// Accept waits for a peer of this user; connections from other users are closed
// unanswered.
func (l *Listener) Accept() (*net.UnixConn, error) {
	for {
		c, err := l.l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if err := checkPeer(c); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}

// Close removes the socket; Accept returns an error.
func (l *Listener) Close() error { return l.l.Close() }

// Dial connects to the rendezvous socket at path, if its directory is private to this
// user and the process listening is this user's. A socket file nobody listens on (its
// process died) refuses at once, and is removed (removeStale).
func Dial(path string, timeout time.Duration) (*net.UnixConn, error) {
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	var before unix.Stat_t
	statErr := unix.Lstat(path, &before)
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unixpacket", path)
	if err != nil {
		if statErr == nil && errors.Is(err, unix.ECONNREFUSED) {
			removeStale(path, &before)
		}
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if err := checkPeer(uc); err != nil {
		uc.Close()
		return nil, err
	}
	return uc, nil
}

// removeStale removes the socket file at path that refused a connection: nobody listens
// on it, so the process that made it died without removing it (a clean Close removes
// it). It goes only if path still names the file that refused (before, its Lstat
// before the dial): a process that started listening there since, which replaces the
// file (Listen), keeps its own. Between that check and the removal a new listener
// would have to remove the old file and bind its own, some microseconds; if it did, its
// peers reach it by UDP until it restarts, nothing worse.
func removeStale(path string, before *unix.Stat_t) bool {
	var now unix.Stat_t
	if unix.Lstat(path, &now) != nil || now.Mode&unix.S_IFMT != unix.S_IFSOCK || now.Dev != before.Dev || now.Ino != before.Ino {
		return false
	}
	return os.Remove(path) == nil
}

// SweepStale removes the socket files in dir whose names begin with prefix and end in
// ".sock", that are older than minAge and that nobody listens on: those of processes
// killed before they could close their devices (a clean Close removes its own). Without
// a sweep they pile up, one per killed process and address, since a file is otherwise
// removed only when a peer happens to dial that very address. A file younger than minAge
// is left alone: its listener may be between bind and listen. It reports how many it
// removed.
func SweepStale(dir, prefix string, minAge time.Duration) int {
	if checkDir(dir) != nil {
		return 0
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range ents {
		name := e.Name()
		if e.Type()&os.ModeSocket == 0 || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".sock") {
			continue
		}
		path := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK ||
			time.Since(time.Unix(st.Mtim.Unix())) < minAge {
			continue
		}
		if refuses(path) && removeStale(path, &st) {
			removed++
		}
	}
	return removed
}

// refuses reports whether a connection to the unix socket at path is refused at once:
// no process listens on it. A listener gets a connection that closes unused.
func refuses(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return errors.Is(unix.Connect(fd, &unix.SockaddrUnix{Name: path}), unix.ECONNREFUSED)
}

// PeerPID is the process at the other end of c (SO_PEERCRED), 0 if unknown.
func PeerPID(c *net.UnixConn) int {
	cred, err := peerCred(c)
	if err != nil {
		return 0
	}
	return int(cred.Pid)
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

func checkPeer(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%w: peer uid %d", ErrPermission, cred.Uid)
	}
	return nil
}

// MaxFDs is the most descriptors one rendezvous message carries.
const MaxFDs = 8

// Send writes one message with the descriptors fds attached (SCM_RIGHTS).
func Send(c *net.UnixConn, msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(msg, oob, nil)
	return err
}

// Recv reads one message into buf and returns its length and the descriptors that
// came with it (the caller owns them: close what it does not keep). A message with
// more than MaxFDs descriptors, or truncated, is an error, and its descriptors are
// closed.
func Recv(c *net.UnixConn, buf []byte) (int, []int, error) {
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return 0, nil, perr
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(fds) > MaxFDs {
		CloseFDs(fds)
		return 0, nil, errors.New("shm: rendezvous message truncated")
	}
	return n, fds, nil
}

// CloseFDs closes descriptors received and not kept.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
