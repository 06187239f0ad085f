package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// DefaultRoot is /var/lib/hostfork for root, else $XDG_STATE_HOME/hostfork
// or ~/.local/state/hostfork. $HOSTFORK_ROOT overrides it.
func DefaultRoot() (string, error) {
	if r := os.Getenv("HOSTFORK_ROOT"); r != "" {
		return r, nil
	}
	return BuiltinRoot()
}

// BuiltinRoot is DefaultRoot without $HOSTFORK_ROOT: the store a user gets
// when nothing names one.
func BuiltinRoot() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/hostfork", nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "hostfork"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no store root: set --root or HOSTFORK_ROOT (%v): %w", err, api.ErrStore)
	}
	return filepath.Join(home, ".local", "state", "hostfork"), nil
}

// storeErr names the store, the problem and the fix.
func storeErr(root, format string, args ...any) error {
	return fmt.Errorf("store root %s %s: %w", root, fmt.Sprintf(format, args...), api.ErrStore)
}

// storeFiles are the names a hostfork store holds at its top.
var storeFiles = map[string]bool{
	registry.FileName: true, registry.FileName + "-wal": true, registry.FileName + "-shm": true,
	registry.FileName + "-journal": true, "registry.lock": true, "admission.lock": true,
	ConfigFile: true, "runs": true, "trees": true, "cache": true, "api.sock": true,
}

// prepareStore checks the store's trust and shape (DESIGN.md, "Trust
// model"), creating it when it does not exist, and returns its absolute
// path. Nobody but the store's owner and root may write or replace the
// store or any directory above it (a root-owned sticky directory such as
// /tmp is accepted as an ancestor); the store and its top-level files are
// made private (0700, 0600), also when they exist; "/" and a non-empty
// directory that is not a hostfork store are refused.
func Prepare(root string) (string, error) {
	if root == "" {
		var err error
		if root, err = DefaultRoot(); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("store root %q: %v: %w", root, err, api.ErrStore)
	}
	root = filepath.Clean(abs)
	if root == "/" {
		return "", storeErr(root, "can't be a store (it is the root directory); choose a directory of its own with --root or HOSTFORK_ROOT")
	}
	uid := os.Geteuid()
	st, err := os.Lstat(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The walk ends at the first missing component: every existing
		// ancestor must be trusted; what is created is private.
		if err := safefs.CheckTrusted(root, uid); err != nil {
			return "", fmt.Errorf("store %s can't be created safely: %v; choose a directory only you (and root) can write, with --root or HOSTFORK_ROOT: %w", root, err, api.ErrStore)
		}
		if err := os.MkdirAll(root, 0o700); err != nil {
			return "", storeErr(root, "can't be created (%v); choose a writable one with --root or HOSTFORK_ROOT", err)
		}
	case err != nil:
		return "", storeErr(root, "can't be used (%v); choose another with --root or HOSTFORK_ROOT", err)
	case st.Mode()&os.ModeSymlink != 0:
		real, _ := filepath.EvalSymlinks(root)
		return "", storeErr(root, "is a symbolic link (to %s); give the real directory with --root or HOSTFORK_ROOT", real)
	case !st.IsDir():
		return "", storeErr(root, "is not a directory; choose another with --root or HOSTFORK_ROOT")
	}
	d, err := safefs.OpenDir(root)
	if err != nil {
		return "", storeErr(root, "can't be read (%v); choose another with --root or HOSTFORK_ROOT", err)
	}
	defer d.Close()
	dst, err := d.Stat()
	if err != nil {
		return "", storeErr(root, "can't be read (%v); choose another with --root or HOSTFORK_ROOT", err)
	}
	if unix.Faccessat(d.Fd(), ".", unix.W_OK|unix.X_OK, 0) != nil {
		return "", storeErr(root, "is not writable by this user; choose another with --root or HOSTFORK_ROOT")
	}
	if int(dst.Uid) != uid {
		return "", storeErr(root, "is owned by uid %d, not by this user (uid %d); a store belongs to one user: use your own with --root or HOSTFORK_ROOT", dst.Uid, uid)
	}
	// Nothing is changed before the directory is known to be a store (or
	// empty) under trusted ancestors: a mistaken --root /etc is refused,
	// not made private.
	if err := safefs.CheckAncestorsTrusted(root, uid); err != nil {
		return "", fmt.Errorf("store %s can't be trusted: %v; choose a directory only you (and root) can write, with --root or HOSTFORK_ROOT: %w", root, err, api.ErrStore)
	}

	shape := func() (names []string, hasRegistry bool, err error) {
		names, err = d.ReadNames()
		if err != nil {
			return nil, false, storeErr(root, "can't be read (%v); choose another with --root or HOSTFORK_ROOT", err)
		}
		foreign := ""
		for _, n := range names {
			if n == registry.FileName {
				hasRegistry = true
			}
			if !storeFiles[n] && n[0] != '.' && foreign == "" {
				foreign = n
			}
		}
		// Only names a store never holds make it foreign: a store another
		// hostfork process is creating right now has runs/ or its lock
		// before its registry.
		if foreign != "" && !hasRegistry {
			return nil, false, storeErr(root, "is not empty and holds no %s (it has %q): it is not a hostfork store; choose an empty or new directory with --root or HOSTFORK_ROOT", registry.FileName, foreign)
		}
		return names, hasRegistry, nil
	}
	if _, _, err := shape(); err != nil {
		return "", err
	}
	if dst.Mode&0o7077 != 0 {
		if err := unix.Fchmod(d.Fd(), 0o700); err != nil {
			return "", storeErr(root, "can't be made private (mode 0700): %v", err)
		}
	}
	// Now private itself (nobody else can add to it from here on), and
	// under trusted ancestors: look again at what it holds.
	if err := safefs.CheckTrusted(root, uid); err != nil {
		return "", fmt.Errorf("store %s can't be trusted: %v; choose a directory only you (and root) can write, with --root or HOSTFORK_ROOT: %w", root, err, api.ErrStore)
	}
	names, hasRegistry, err := shape()
	if err != nil {
		return "", err
	}
	if !hasRegistry || registryEmpty(d) {
		if rd, err := d.OpenDir("runs"); err == nil {
			runs, _ := rd.ReadNames()
			rd.Close()
			if len(runs) > 0 {
				return "", storeErr(root, "has no usable registry: %s is missing or empty but runs/ holds %d run directories: the registry was lost or truncated; restore it from a backup, or move the store aside and start a new one", registry.FileName, len(runs))
			}
		}
	}
	// Tighten what is there: every file of the store's top level is the
	// owner's alone.
	for _, n := range names {
		fst, err := d.Lstat(n)
		if err != nil {
			continue
		}
		if fst.Mode&unix.S_IFMT == unix.S_IFLNK {
			return "", storeErr(root, "holds %s as a symbolic link; a store holds none (move it away)", n)
		}
		if int(fst.Uid) != uid {
			return "", storeErr(root, "holds %s owned by uid %d; a store's files belong to its owner (move it away)", n, fst.Uid)
		}
		want := uint32(0o600)
		if fst.Mode&unix.S_IFMT == unix.S_IFDIR {
			want = 0o700
		}
		if fst.Mode&0o077 != 0 && fst.Mode&unix.S_IFMT != unix.S_IFSOCK {
			if err := d.Lchmod(n, os.FileMode(want)); err != nil {
				return "", storeErr(root, "holds %s, which can't be made private: %v", n, err)
			}
			// A store that was open to others: its records' files may be
			// too. Walk hostfork's own layout once (the trees' contents
			// and exported copies keep their modes: they are the
			// workload's).
			switch n {
			case "runs":
				if rd, err := d.OpenDir(n); err == nil {
					tightenBelow(rd, 0)
					rd.Close()
				}
			case "trees":
				if td, err := d.OpenDir(n); err == nil {
					tightenEntries(td, true)
					td.Close()
				}
			}
		}
	}
	if _, err := d.EnsurePrivateDir("runs", 0o700); err != nil {
		return "", storeErr(root, "can't be read (runs: %v)", err)
	}
	return root, nil
}

// tightenBelow makes hostfork's own files below a run directory level
// private: runs/<env>/ (depth 0), its files and commands/<cid>/ with
// theirs; exports/ and anything deeper are left as they are. Symbolic
// links are never followed or changed.
func tightenBelow(d *safefs.Dir, depth int) {
	names, err := d.ReadNames()
	if err != nil {
		return
	}
	for _, n := range names {
		st, err := d.Lstat(n)
		if err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK || int(st.Uid) != os.Geteuid() {
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		want := os.FileMode(0o600)
		if isDir {
			want = 0o700
		}
		if st.Mode&0o077 != 0 && st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			_ = d.Lchmod(n, want)
		}
		if n == "exports" && isDir {
			// Export results and markers, not the exported copies.
			if sub, err := d.OpenDir(n); err == nil {
				tightenEntries(sub, false)
				sub.Close()
			}
			continue
		}
		if !isDir || depth >= 3 {
			continue
		}
		if sub, err := d.OpenDir(n); err == nil {
			tightenBelow(sub, depth+1)
			sub.Close()
		}
	}
}

// tightenEntries makes d's own regular files 0600 and, with dirs, its
// directories 0700, without going below them.
func tightenEntries(d *safefs.Dir, dirs bool) {
	names, err := d.ReadNames()
	if err != nil {
		return
	}
	for _, n := range names {
		st, err := d.Lstat(n)
		if err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o077 == 0 {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			_ = d.Lchmod(n, 0o600)
		case unix.S_IFDIR:
			if dirs {
				_ = d.Lchmod(n, 0o700)
			}
		}
	}
}

func registryEmpty(d *safefs.Dir) bool {
	st, err := d.Lstat(registry.FileName)
	return err == nil && st.Size == 0
}

// checkRegistry refuses a registry that lost its records: an empty
// database beside run directories (a truncated or replaced registry.sqlite
// would otherwise be re-initialised and live environments vanish).
func CheckRegistry(ctx context.Context, root string, reg *registry.DB) error {
	inUse := func() (bool, error) {
		has, err := reg.AnyEnv(ctx)
		if err != nil {
			return false, fmt.Errorf("reading registry: %v: %w", err, api.ErrStore)
		}
		return has, nil
	}
	// A registry with an environment is in use: the common case costs one
	// indexed read, not a read of runs/ (a directory of thousands of
	// entries in a store with retention).
	if has, err := inUse(); err != nil || has {
		return err
	}
	// An empty registry: the directory, then the registry again. A run
	// directory is made only after its environment's record is committed
	// (the ledger rule), so one seen now has its record in any read of the
	// registry that follows. (Trusting the first read would race a
	// concurrent first run.)
	d, err := os.Open(filepath.Join(root, "runs"))
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(1)
	d.Close()
	if len(names) == 0 {
		return nil
	}
	if has, err := inUse(); err != nil || has {
		return err
	}
	return storeErr(root, "has no usable registry: %s holds no environment but runs/ holds run directories (%s, …): the registry was lost, truncated or replaced; restore registry.sqlite from a backup, or move the store aside and start a new one", registry.FileName, names[0])
}

// ensureConfig writes the default configuration when the store has none.
func EnsureConfig(root string) {
	f, err := os.OpenFile(filepath.Join(root, ConfigFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return // exists (or unwritable: Config reports that)
	}
	_, _ = f.WriteString(defaultConfig)
	f.Close()
}
