package hostfork

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Options configure a Host.
type Options struct {
	// Root is the store directory; "" means DefaultRoot().
	Root string
	// CgroupParent is the cgroup2 directory under which environments get
	// their groups; "" means $HOSTFORK_CGROUP_PARENT, else <cgroup2
	// mount>/hostfork for root.
	CgroupParent string
	// Exe is the hostfork executable re-executed as the guardian; "" means
	// /proc/self/exe (the running binary, which must dispatch child modes
	// first, as cmd/hostfork does).
	Exe string
}

// Host is an open store plus what was learned about this host.
type Host struct {
	root string
	reg  *registry.DB
	opts Options

	capOnce sync.Once
	caps    Capabilities
}

// Capabilities is what the host offers for ownership.
type Capabilities struct {
	Cgroup2       bool   `json:"cgroup2"`
	CgroupMount   string `json:"cgroup_mount,omitempty"`
	CgroupParent  string `json:"cgroup_parent,omitempty"`
	Hybrid        bool   `json:"hybrid"`
	Cgroup2Reason string `json:"cgroup2_reason,omitempty"`
}

// DefaultRoot is /var/lib/hostfork for root, else $XDG_STATE_HOME/hostfork
// or ~/.local/state/hostfork. $HOSTFORK_ROOT overrides it.
func DefaultRoot() (string, error) {
	if r := os.Getenv("HOSTFORK_ROOT"); r != "" {
		return r, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/hostfork", nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "hostfork"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no store root: set --root or HOSTFORK_ROOT (%v): %w", err, ErrStore)
	}
	return filepath.Join(home, ".local", "state", "hostfork"), nil
}

// Open opens (creating if needed, mode 0700) the store at opts.Root.
func Open(ctx context.Context, opts Options) (*Host, error) {
	root := opts.Root
	if root == "" {
		var err error
		if root, err = DefaultRoot(); err != nil {
			return nil, err
		}
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("store root %q: %v: %w", opts.Root, err, ErrStore)
	}
	if st, err := os.Stat(root); err == nil {
		if !st.IsDir() {
			return nil, fmt.Errorf("store root %s is not a directory; choose another with --root or HOSTFORK_ROOT: %w", root, ErrStore)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("creating store root %s: %v; choose a writable one with --root or HOSTFORK_ROOT: %w", root, err, ErrStore)
		}
	} else {
		return nil, fmt.Errorf("store root %s can't be used (%v); choose a writable one with --root or HOSTFORK_ROOT: %w", root, err, ErrStore)
	}
	if err := unix.Access(root, unix.W_OK|unix.X_OK); err != nil {
		return nil, fmt.Errorf("store root %s is not writable by this user; choose another with --root or HOSTFORK_ROOT: %w", root, ErrStore)
	}
	if err := os.MkdirAll(filepath.Join(root, "runs"), 0o700); err != nil {
		return nil, fmt.Errorf("store root %s: %v: %w", root, err, ErrStore)
	}
	ensureConfig(root)
	reg, err := registry.Open(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrStore)
	}
	if opts.Exe == "" {
		opts.Exe = "/proc/self/exe"
	}
	return &Host{root: root, reg: reg, opts: opts}, nil
}

// Root is the store directory.
func (h *Host) Root() string { return h.root }

// Close releases the registry.
func (h *Host) Close() error { return h.reg.Close() }

// Capabilities probes (once) what ownership tiers this host offers.
func (h *Host) Capabilities() Capabilities {
	h.capOnce.Do(func() { h.caps = probeCapabilities(h.opts.CgroupParent) })
	return h.caps
}

func probeCapabilities(parent string) Capabilities {
	var c Capabilities
	m, err := cgroup.FindMount()
	if err != nil {
		c.Cgroup2Reason = err.Error()
		return c
	}
	c.CgroupMount = m.Path
	c.Hybrid = m.Hybrid
	if parent == "" {
		parent = os.Getenv("HOSTFORK_CGROUP_PARENT")
	}
	if parent == "" {
		if os.Geteuid() != 0 {
			d, ok := cgroup.DelegatedSubtree(m.Path, m.Self, os.Geteuid())
			if !ok {
				c.Cgroup2Reason = "no delegated cgroup2 subtree for this user: this process's cgroup " + m.Self + " is not inside a directory this user owns (ask the administrator to delegate one — chown it to you, or use a systemd user session with Delegate=yes — and run from inside it, or set HOSTFORK_CGROUP_PARENT)"
				return c
			}
			parent = filepath.Join(d, "hostfork")
		} else {
			parent = filepath.Join(m.Path, "hostfork")
		}
	}
	if !strings.HasPrefix(filepath.Clean(parent)+"/", filepath.Clean(m.Path)+"/") {
		c.Cgroup2Reason = fmt.Sprintf("cgroup parent %s is not under the cgroup2 mount %s", parent, m.Path)
		return c
	}
	if err := cgroup.EnsureParent(parent); err != nil {
		c.Cgroup2Reason = err.Error()
		return c
	}
	if err := unix.Access(parent, unix.W_OK); err != nil {
		c.Cgroup2Reason = fmt.Sprintf("cgroup parent %s is not writable by this user", parent)
		return c
	}
	c.Cgroup2 = true
	c.CgroupParent = parent
	return c
}

// newID returns a short random id: 10 characters of lowercase base32hex.
func newID() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	var b [10]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return string(b[:])
}
