package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// Socket is the server's listening unix socket and the lock that makes it
// the only server on that path.
type Socket struct {
	*net.UnixListener
	path     string
	dev, ino uint64
	lock     *lockfile.Lock
}

// Path is the socket's path.
func (s *Socket) Path() string { return s.path }

// Close stops listening, removes the socket file if it is still the one
// Listen made (same device and inode), and releases the lock.
func (s *Socket) Close() error {
	err := s.UnixListener.Close()
	if fi, err := os.Lstat(s.path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Dev == s.dev && st.Ino == s.ino {
			_ = os.Remove(s.path)
		}
	}
	s.lock.Release()
	return err
}

// ListenOptions say where the socket goes and who owns it.
type ListenOptions struct {
	// Path is the socket's absolute path.
	Path string
	// StoreDir is the store's root: a stale socket is removed only there.
	StoreDir string
	// UID and GID own the socket (the store's owner); it is made 0660.
	UID, GID int
}

// Listen makes the server's socket. It refuses a path that exists and is
// not a socket, and a socket a server answers on; a stale socket (nobody
// answers) is removed only when it is a socket owned by this user in the
// store's directory. Concurrent starts are serialized by a lock file beside
// the socket (".NAME.lock"). The socket is bound in a private temporary
// directory, given its mode and owner there, and renamed into place, so it
// never exists at Path with other permissions.
func Listen(o ListenOptions) (*Socket, error) {
	path := filepath.Clean(o.Path)
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket %q: give an absolute path: %w", o.Path, api.ErrInvalid)
	}
	if len(path) > 107 {
		return nil, fmt.Errorf("socket %s: the path is longer than a unix socket address allows (107 bytes); choose a shorter --socket: %w", path, api.ErrInvalid)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("socket %s: its directory %s does not exist or is not a directory: %w", path, dir, api.ErrInvalid)
	}
	// Another user who can write the directory could replace the socket
	// with their own and be served the clients' requests: the store's
	// trust rule holds for it too (DESIGN.md, "Trust model").
	if err := safefs.CheckTrusted(dir, o.UID); err != nil {
		return nil, fmt.Errorf("socket %s: %w; choose a --socket in a directory only you and root can write (%w)", path, err, api.ErrInvalid)
	}
	lock, err := lockBeside(path)
	if err != nil {
		return nil, err
	}
	s, err := listenLocked(path, dir, o)
	if err != nil {
		lock.Release()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func lockBeside(path string) (*lockfile.Lock, error) {
	lp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
	f, err := lockfile.Open(lp)
	if err != nil {
		return nil, fmt.Errorf("socket %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("socket lock %s: %w", lp, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("socket lock %s is not a regular file of this user (uid %d): remove it or choose another --socket: %w", lp, st.Uid, api.ErrForbidden)
	}
	now, cancel := context.WithCancel(context.Background())
	cancel()
	l, err := lockfile.Take(now, f)
	if errors.Is(err, lockfile.ErrBusy) {
		return nil, fmt.Errorf("another hostfork serve holds %s (it serves %s): stop it first: %w", lp, path, api.ErrExists)
	}
	if err != nil {
		return nil, fmt.Errorf("socket %w", err)
	}
	return l, nil
}

func listenLocked(path, dir string, o ListenOptions) (*Socket, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("socket %s: %w", path, err)
	case fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("socket %s exists and is not a socket: remove it or choose another --socket: %w", path, api.ErrExists)
	default:
		if answers(path) {
			return nil, fmt.Errorf("a server already answers on %s: stop it first, or choose another --socket: %w", path, api.ErrExists)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
			return nil, fmt.Errorf("stale socket %s belongs to uid %d, not this user: remove it yourself: %w", path, uid, api.ErrForbidden)
		}
		if o.StoreDir == "" || filepath.Clean(o.StoreDir) != dir {
			return nil, fmt.Errorf("stale socket %s is outside the store's directory: remove it yourself (only a stale socket in the store is removed automatically): %w", path, api.ErrExists)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}

	parent, err := safefs.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer parent.Close()
	tmp, err := os.MkdirTemp(dir, "."+filepath.Base(path)+"-")
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	tdir, err := parent.OpenDir(filepath.Base(tmp))
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer tdir.Close()
	tpath := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tpath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*Socket, error) {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// Mode, owner and the move into place act relative to the opened
	// directories, never through a path resolved again.
	if err := tdir.Lchmod("s", 0o660); err != nil {
		return fail(err)
	}
	if err := tdir.Lchown("s", o.UID, o.GID); err != nil && os.Geteuid() == 0 {
		return fail(err)
	}
	if err := tdir.Rename("s", parent, filepath.Base(path)); err != nil {
		if errors.Is(err, safefs.ErrExists) {
			return fail(fmt.Errorf("it appeared while starting: %w", api.ErrExists))
		}
		return fail(err)
	}
	placed, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	st := placed.Sys().(*syscall.Stat_t)
	return &Socket{UnixListener: ln, path: path, dev: st.Dev, ino: st.Ino}, nil
}

// answers reports whether something accepts connections on the socket.
func answers(path string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		// ECONNREFUSED: nobody listens (stale). Anything else (EACCES,
		// a timeout) is treated as "maybe": refuse rather than remove.
		return !errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return true
}

// peer is the credentials of the process on the other end of a connection.
type peer struct {
	ok       bool // read from SO_PEERCRED
	uid, pid int
}

type peerKey struct{}

// peerOfConn reads the credentials of the process on the other end of c.
func peerOfConn(c net.Conn) peer {
	switch uc := c.(type) {
	case *limitedConn:
		return uc.peer
	case *net.UnixConn:
		if uid, pid, ok := linux.PeerCred(uc); ok {
			return peer{ok: true, uid: uid, pid: pid}
		}
	}
	return peer{}
}

// connContext records the peer's credentials in the connection's context
// (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, peerOfConn(c))
}

// Connection limits (issue 39, item 4): another local user may connect
// to the socket (the kernel lets them when its mode does) but only gets
// 403s, so their connections are few, and what they hold can't take the
// descriptors that root's and the owner's requests need. A TCP listener
// has no credentials: its connections are bounded on their own
// (Front.MaxConns).
const (
	// MaxConns bounds every connection of one listener.
	MaxConns = 1024
	// MaxOtherConns bounds the connections of all users but root and the
	// store's owner together, and MaxConnsPerOtherUser each one's: the
	// rest of MaxConns is the reserve that keeps root and the owner
	// served.
	MaxOtherConns        = 64
	MaxConnsPerOtherUser = 8
	// MaxMetricsConns bounds the TCP metrics listener and the web view.
	MaxMetricsConns = 32
)

// limitListener closes a connection beyond its limits as soon as it is
// accepted, before reading anything from it. Only the socket's (unix)
// counts per uid; a TCP listener's has max alone.
type limitListener struct {
	net.Listener
	owner                int  // the store's owner; root and it are privileged
	unix                 bool // count per uid (peer credentials)
	max, others, perUser int

	mu          sync.Mutex
	total, nOth int
	byUID       map[int]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := peerOfConn(c)
		other := l.unix && (!p.ok || (p.uid != 0 && p.uid != l.owner))
		if !l.take(p.uid, other) {
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, peer: p, release: func() { l.release(p.uid, other) }}, nil
	}
}

func (l *limitListener) take(uid int, other bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || other && (l.nOth >= l.others || l.byUID[uid] >= l.perUser) {
		return false
	}
	l.total++
	if other {
		l.nOth++
		l.byUID[uid]++
	}
	return true
}

func (l *limitListener) release(uid int, other bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if other {
		l.nOth--
		if l.byUID[uid]--; l.byUID[uid] <= 0 {
			delete(l.byUID, uid)
		}
	}
}

// limitedConn is a counted connection; its peer was read at accept.
type limitedConn struct {
	net.Conn
	peer    peer
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func peerOf(ctx context.Context) peer {
	p, _ := ctx.Value(peerKey{}).(peer)
	return p
}

// Inherited returns the listening socket systemd passed to this process
// (socket activation, sd_listen_fds(3)): LISTEN_PID names this process and
// LISTEN_FDS is 1, so descriptor 3 is the socket. It returns nil when
// nothing was passed. It unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES
// either way, so the commands the server starts don't inherit them, and
// refuses anything but one listening unix stream socket. The socket's file
// is systemd's: closing the listener leaves it in place.
func Inherited() (*net.UnixListener, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(v)
	}
	if fds == "" {
		return nil, nil
	}
	if p, err := strconv.Atoi(pid); err != nil || p != os.Getpid() {
		return nil, nil // meant for another process
	}
	if fds != "1" {
		return nil, fmt.Errorf("systemd passed %s sockets (LISTEN_FDS); hostfork serve takes one: a .socket unit with one ListenStream=: %w", fds, api.ErrInvalid)
	}
	const fd = 3 // SD_LISTEN_FDS_START
	ok, err := linux.ListeningUnixStream(fd)
	if err != nil {
		return nil, fmt.Errorf("the socket systemd passed (descriptor 3): %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("the socket systemd passed is not a listening unix stream socket (ListenStream=/path/api.sock): %w", api.ErrInvalid)
	}
	f := os.NewFile(fd, "systemd socket")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("the socket systemd passed: %w", err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("the socket systemd passed is not a unix socket: %w", api.ErrInvalid)
	}
	// The socket's file belongs to the socket unit (RemoveOnStop=).
	ul.SetUnlinkOnClose(false)
	return ul, nil
}
