package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Bus names the D-Bus endpoint of one systemd manager.
type Bus struct {
	kind string // "system", "user" or "socket"
	path string // the socket, for kind "socket"
}

// SystemBus is the system manager's bus ($DBUS_SYSTEM_BUS_ADDRESS or
// /run/dbus/system_bus_socket).
var SystemBus = Bus{kind: "system"}

// UserBus is the calling user's session bus, where the user's manager
// answers ($DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus, else
// /run/user/UID/bus). It never starts a bus.
var UserBus = Bus{kind: "user"}

// DefaultBus is the manager hostfork talks to: the system manager for
// root, the user's manager otherwise.
func DefaultBus() Bus {
	if os.Geteuid() == 0 {
		return SystemBus
	}
	return UserBus
}

// SocketBus is a bus reached through an explicit socket path, for example a
// container's system bus seen from the host:
// /proc/PID/root/run/dbus/system_bus_socket. (A manager's private socket,
// /run/systemd/private, is not a bus and is not supported.)
func SocketBus(path string) Bus { return Bus{kind: "socket", path: path} }

func (b Bus) String() string {
	if b.kind == "socket" {
		return "the bus at " + b.path
	}
	if b.kind == "" {
		return "no bus"
	}
	return "the " + b.kind + " bus"
}

// address resolves the bus's D-Bus address without side effects.
func (b Bus) address() (string, error) {
	switch b.kind {
	case "system":
		if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
			return a, nil
		}
		return "unix:path=/run/dbus/system_bus_socket", nil
	case "user":
		if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
			return a, nil
		}
		dirs := []string{}
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			dirs = append(dirs, x)
		}
		dirs = append(dirs, "/run/user/"+strconv.Itoa(os.Getuid()))
		for _, d := range dirs {
			p := filepath.Join(d, "bus")
			if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
				return "unix:path=" + escapeAddress(p), nil
			}
		}
		return "", fmt.Errorf("%w: no user bus (set DBUS_SESSION_BUS_ADDRESS, or log in through a session that starts 'systemd --user')", ErrNoBus)
	case "socket":
		if !filepath.IsAbs(b.path) {
			return "", fmt.Errorf("%w: bus socket %q is not an absolute path", ErrInvalid, b.path)
		}
		return "unix:path=" + escapeAddress(b.path), nil
	}
	return "", fmt.Errorf("%w: no bus selected", ErrInvalid)
}

// escapeAddress escapes a value for a D-Bus address: bytes outside
// [-0-9A-Za-z_/.\*] become %XX.
func escapeAddress(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_/.\\*", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	return b.String()
}

// open dials, authenticates (EXTERNAL, by uid, so no user database lookup)
// and says Hello. The connection lives until life is cancelled.
func (b Bus) open(life context.Context) (*dbus.Conn, error) {
	addr, err := b.address()
	if err != nil {
		return nil, err
	}
	conn, err := dbus.Dial(addr, dbus.WithContext(life))
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Options tune a Conn. Zero values mean the defaults.
type Options struct {
	// CallTimeout bounds every D-Bus call, including connecting (default
	// 5 s).
	CallTimeout time.Duration
	// JobTimeout bounds waiting for a stop job to finish when the caller's
	// context has no earlier deadline (default 90 s, systemd's default
	// stop timeout). A start job of a scope is bounded by CallTimeout.
	JobTimeout time.Duration
}

// Conn is a connection to one systemd manager. It is safe for concurrent
// use. A call that finds the connection broken replaces it; references a
// unit held through the old connection (ScopeOptions.Ref) are lost with it.
type Conn struct {
	bus  Bus
	opts Options

	mu         sync.Mutex
	live       *link
	closed     bool
	reconnects int
}

// link is one established connection: go-systemd's pair of bus
// connections (calls and signals), the raw call connection for calls
// go-systemd has no context-taking form of, and what was learned over it.
type link struct {
	sd     *sd.Conn
	raw    *dbus.Conn
	cancel context.CancelFunc

	mu      sync.Mutex
	version string // the manager's Version, read once per connection
}

func (l *link) connected() bool { return l.sd.Connected() }

func (l *link) close() {
	l.sd.Close()
	l.cancel()
}

// Connect connects to the manager on bus. The connection attempt is bounded
// by opts.CallTimeout (and ctx).
func Connect(ctx context.Context, bus Bus, opts Options) (*Conn, error) {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 5 * time.Second
	}
	if opts.JobTimeout <= 0 {
		opts.JobTimeout = 90 * time.Second
	}
	c := &Conn{bus: bus, opts: opts}
	cctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	if _, err := c.current(cctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the connection. Units it created keep running; references
// it held (ScopeOptions.Ref) are released by the manager.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.live != nil {
		c.live.close()
		c.live = nil
	}
	return nil
}

// current returns the live link, dialling a new one if there is none or the
// old one broke. Dialling is bounded by ctx.
func (c *Conn) current(ctx context.Context) (*link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.live != nil {
		if c.live.connected() {
			return c.live, nil
		}
		c.live.close()
		c.live = nil
		c.reconnects++
	}
	l, err := dial(ctx, c.bus)
	if err != nil {
		return nil, err
	}
	c.live = l
	return l, nil
}

// drop discards l if it is still the live link, so that the next call
// reconnects.
func (c *Conn) drop(l *link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == l {
		c.live.close()
		c.live = nil
		c.reconnects++
	}
}

// dial establishes a link. godbus ties a connection's lifetime to the
// context it was dialled with, so the link gets its own long-lived context;
// ctx only bounds the attempt: when it ends first, the half-made
// connections are closed and the attempt's goroutine returns.
func dial(ctx context.Context, bus Bus) (*link, error) {
	life, cancel := context.WithCancel(context.Background())
	type result struct {
		l   *link
		err error
	}
	done := make(chan result, 1)
	go func() {
		var first *dbus.Conn
		conn, err := sd.NewConnection(func() (*dbus.Conn, error) {
			dc, err := bus.open(life)
			if err == nil && first == nil {
				first = dc // go-systemd's call connection is the first one dialled
			}
			return dc, err
		})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{l: &link{sd: conn, raw: first, cancel: cancel}}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("connecting to the systemd manager on %s: %w", bus, r.err)
		}
		return r.l, nil
	case <-ctx.Done():
		cancel()
		go func() {
			if r := <-done; r.l != nil {
				r.l.close()
			}
		}()
		return nil, fmt.Errorf("connecting to the systemd manager on %s: %w", bus, ctx.Err())
	}
}

// call runs f on the live link with the per-call timeout. When f fails
// because the connection broke, the link is dropped so that the next call
// reconnects; an idempotent call (retry) is then tried once more on a fresh
// connection.
func (c *Conn) call(ctx context.Context, retry bool, f func(ctx context.Context, l *link) error) error {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
		l, err := c.current(cctx)
		if err == nil {
			err = f(cctx, l)
			if err != nil && !l.connected() {
				c.drop(l)
				err = fmt.Errorf("%w: %w", ErrDisconnected, err)
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		if !retry || attempt > 0 || !errors.Is(err, ErrDisconnected) || ctx.Err() != nil {
			return classify(err)
		}
	}
}

// Version is the manager's version string, e.g. "252.39-1~deb12u2".
func (c *Conn) Version(ctx context.Context) (string, error) {
	var v string
	err := c.call(ctx, true, func(ctx context.Context, l *link) error {
		var err error
		v, err = l.managerVersion(ctx)
		return err
	})
	return v, err
}

func (l *link) managerVersion(ctx context.Context) (string, error) {
	l.mu.Lock()
	cached := l.version
	l.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	var v dbus.Variant
	err := l.raw.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", "Version").Store(&v)
	if err != nil {
		return "", fmt.Errorf("reading the manager's version: %w", err)
	}
	s, ok := v.Value().(string)
	if !ok {
		return "", fmt.Errorf("reading the manager's version: unexpected type %s", v.Signature())
	}
	l.mu.Lock()
	l.version = s
	l.mu.Unlock()
	return s, nil
}

// PIDFDsSince is the first systemd version that takes PIDFDs when a scope
// is created (systemd NEWS, "CHANGES WITH 255": "Scope units can now be
// created using PIDFDs instead of PIDs").
const PIDFDsSince = 255

// MajorVersion returns the leading number of a systemd version string
// ("252.39-1~deb12u2" → 252, "v256" → 256), or 0 if there is none.
func MajorVersion(v string) int {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// SupportsPIDFDs reports whether the manager takes PIDFDs at scope
// creation, judged from its Version (see PIDFDsSince).
func (c *Conn) SupportsPIDFDs(ctx context.Context) (bool, string, error) {
	v, err := c.Version(ctx)
	if err != nil {
		return false, "", err
	}
	return MajorVersion(v) >= PIDFDsSince, v, nil
}
