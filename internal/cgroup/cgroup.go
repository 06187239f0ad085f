package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// ErrNoCgroup2 reports that no writable cgroup2 hierarchy is available.
var ErrNoCgroup2 = errors.New("no writable cgroup2 hierarchy")

// ErrExists reports that a group to be created already exists; allocation
// never adopts an existing group.
var ErrExists = errors.New("cgroup already exists")

// Mount describes the cgroup2 hierarchy hostfork can use.
type Mount struct {
	Path   string // mount point, e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified
	Hybrid bool   // v1 controllers are mounted beside it
}

// FindMount locates the cgroup2 mount (by statfs in the usual layouts, else
// from /proc/self/mountinfo) and checks
// that it is writable by this process.
func FindMount() (Mount, error) {
	// The mount table is read once per process: a run asks several times,
	// and each reading parses the whole table. A remembered mount point is
	// used only while it still is a cgroup2 filesystem (one statfs).
	found.Lock()
	defer found.Unlock()
	if found.ok {
		var st unix.Statfs_t
		if unix.Statfs(found.m.Path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return found.m, nil
		}
		found.ok = false
	}
	m, err := findMount()
	if err == nil {
		found.m, found.ok = m, true
	}
	return m, err
}

// found is the mount FindMount found last.
var found struct {
	sync.Mutex
	m  Mount
	ok bool
}

func findMount() (Mount, error) {
	if m, ok := statMount(); ok {
		return m, nil
	}
	return scanMount()
}

// statMount recognizes the two usual layouts with a few statfs calls,
// without parsing the mount table (a fifth of a millisecond in a new
// process): cgroup2 mounted at /sys/fs/cgroup (unified), or a tmpfs there
// holding cgroup2 at unified/ beside v1 hierarchies (systemd's hybrid
// layout, recognized by its name=systemd or memory hierarchy). Anything
// else is left to scanMount.
func statMount() (Mount, bool) {
	is := func(path string, magic int64) bool {
		var st unix.Statfs_t
		return unix.Statfs(path, &st) == nil && int64(st.Type) == magic
	}
	switch {
	case is("/sys/fs/cgroup", unix.CGROUP2_SUPER_MAGIC):
		return Mount{Path: "/sys/fs/cgroup"}, true
	case is("/sys/fs/cgroup", unix.TMPFS_MAGIC) && is("/sys/fs/cgroup/unified", unix.CGROUP2_SUPER_MAGIC) &&
		(is("/sys/fs/cgroup/systemd", unix.CGROUP_SUPER_MAGIC) || is("/sys/fs/cgroup/memory", unix.CGROUP_SUPER_MAGIC)):
		return Mount{Path: "/sys/fs/cgroup/unified", Hybrid: true}, true
	}
	return Mount{}, false
}

// scanMount finds the cgroup2 mount in the mount table.
func scanMount() (Mount, error) {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2", "cgroup"))
	if err != nil {
		return Mount{}, fmt.Errorf("reading mountinfo: %w", err)
	}
	var m Mount
	var v1 bool
	for _, mi := range ms {
		switch mi.FSType {
		case "cgroup2":
			if m.Path == "" || mi.Mountpoint == "/sys/fs/cgroup" {
				m.Path = mi.Mountpoint
			}
		case "cgroup":
			v1 = true
		}
	}
	if m.Path == "" {
		return Mount{}, fmt.Errorf("%w: no cgroup2 filesystem is mounted (mount one with 'mount -t cgroup2 none /sys/fs/cgroup/unified')", ErrNoCgroup2)
	}
	m.Hybrid = v1
	return m, nil
}

// SelfPath is this process's cgroup2 path relative to the mount ("/" when
// /proc/self/cgroup can't say). It is read anew on every call (a process
// can be moved); FindMount does not read it: only the capability check of
// an unprivileged user needs it, not each of a run's several FindMount
// calls.
func SelfPath() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "/"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "0::") {
			return strings.TrimSpace(line[3:])
		}
	}
	return "/"
}

// Group is one cgroup2 directory.
type Group struct {
	Path string
}

// Below is p's path relative to the cgroup2 mount mount ("a/b"), and
// false when either is empty, p is the mount itself, or p is not below it.
// The engine mirrors its cgroup2 parent by this path in each cgroup v1
// hierarchy (docs/decisions.md, entry 70).
func Below(mount, p string) (string, bool) {
	if mount == "" || p == "" {
		return "", false
	}
	rel, err := filepath.Rel(mount, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// Open names an existing group; it does not touch the filesystem.
func Open(path string) *Group { return &Group{Path: path} }

// Create makes path exclusively: an existing directory is ErrExists, never
// adopted. The parent must exist.
func Create(path string) (*Group, error) {
	if err := unix.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("creating cgroup %s: %w", path, ErrExists)
		}
		return nil, &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return &Group{Path: path}, nil
}

// EnsureParent creates path and its missing parents (for hostfork's own
// fixed parent group, which is shared and long-lived).
func EnsureParent(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("creating cgroup parent %s: %w", path, err)
	}
	return nil
}

// Inode returns the group directory's inode number, which is also the
// cgroup id the kernel reports.
func (g *Group) Inode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(g.Path, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: g.Path, Err: err}
	}
	return st.Ino, nil
}

// Exists reports whether the directory is present.
func (g *Group) Exists() bool {
	_, err := os.Stat(filepath.Join(g.Path, "cgroup.procs"))
	return err == nil
}

// OpenFD opens the group for clone3(CLONE_INTO_CGROUP).
func (g *Group) OpenFD() (int, error) {
	fd, err := unix.Open(g.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: g.Path, Err: err}
	}
	return fd, nil
}

func (g *Group) write(file, val string) error { return WriteFile(filepath.Join(g.Path, file), val) }

// WriteFile writes val to an existing control file in one write(2), as
// the cgroup interface requires (os.File retries EINTR itself).
func WriteFile(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Kill writes 1 to cgroup.kill: SIGKILL to every process in the group and
// its descendants, including ones forked during the kill.
func (g *Group) Kill() error {
	if err := g.write("cgroup.kill", "1"); err != nil {
		return fmt.Errorf("killing cgroup %s: %w", g.Path, err)
	}
	return nil
}

// SetFrozen writes cgroup.freeze.
func (g *Group) SetFrozen(frozen bool) error {
	v := "0"
	if frozen {
		v = "1"
	}
	if err := g.write("cgroup.freeze", v); err != nil {
		return fmt.Errorf("freezing cgroup %s: %w", g.Path, err)
	}
	return nil
}

// Events is the parsed cgroup.events file.
type Events struct {
	Populated bool
	Frozen    bool
}

// Events reads cgroup.events.
func (g *Group) Events() (Events, error) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cgroup.events"))
	if err != nil {
		return Events{}, err
	}
	return parseEvents(string(b)), nil
}

func parseEvents(s string) Events {
	var e Events
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		switch k {
		case "populated":
			e.Populated = v == "1"
		case "frozen":
			e.Frozen = v == "1"
		}
	}
	return e
}

// Procs lists the PIDs directly in this group (not in child groups).
func (g *Group) Procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// AllProcs lists the PIDs in this group and all its descendants.
func (g *Group) AllProcs() ([]int, error) {
	var all []int
	err := filepath.WalkDir(g.Path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		pids, err := Open(p).Procs()
		// A group removed while it is read (ENOENT, or ENODEV from one
		// being removed) has no members.
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENODEV) {
			return err
		}
		all = append(all, pids...)
		return nil
	})
	return all, err
}

// WaitEvent blocks until cond holds for cgroup.events, the group disappears
// (reported as an unpopulated, unfrozen group), or ctx ends. It re-reads
// the file at intervals that grow from firstPoll to lastPoll (decision
// 61). It uses no inotify: closing an inotify instance that held a watch
// waits for the kernel's fsnotify grace period (8–16 ms on this host),
// longer than a killed tree of 50 processes takes to leave.
func (g *Group) WaitEvent(ctx context.Context, cond func(Events) bool) (Events, error) {
	step := firstPoll
	for {
		ev, err := g.Events()
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
			return Events{}, nil
		}
		if err != nil {
			return ev, err
		}
		if cond(ev) {
			return ev, nil
		}
		if err := pause(ctx, step); err != nil {
			return ev, err
		}
		step = min(step*3/2, lastPoll)
	}
}

// The intervals of WaitEvent's reads: a read costs about 10 µs, so the
// first millisecond takes six and a wait that lasts takes a hundred a
// second.
const (
	firstPoll = 50 * time.Microsecond
	lastPoll  = 10 * time.Millisecond
)

// pause sleeps for d, or until ctx ends (its error). Below a millisecond
// it sleeps in the kernel: the Go runtime's timers wake about a
// millisecond late in a process with nothing else to do.
func pause(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d < time.Millisecond {
		ts := unix.NsecToTimespec(d.Nanoseconds())
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WaitEmpty waits for populated 0.
func (g *Group) WaitEmpty(ctx context.Context) error {
	_, err := g.WaitEvent(ctx, func(e Events) bool { return !e.Populated })
	return err
}

// Remove removes the group and its empty child groups, deepest first. A
// group that still has processes gives EBUSY.
//
// known names child groups the caller made (paths relative to the group,
// each listed before its parent): they are removed first, and when that
// leaves the group empty it goes without a directory being listed. A
// cgroup2 directory lists every interface file of the group, so on the
// way out of every run the listing cost more than the removals. Anything
// else (a child not named, a group still busy) falls back to the listing.
func (g *Group) Remove(known ...string) error {
	if g.removeKnown(known) {
		return nil
	}
	var dirs []string
	err := filepath.WalkDir(g.Path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing cgroup %s: %w", g.Path, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		var rerr error
		for try := 0; try < 3; try++ {
			rerr = unix.Rmdir(dirs[i])
			if rerr != unix.EBUSY {
				break
			}
			// A killed task may still be leaving the group: wait for the
			// kernel's populated 0 (WaitEmpty), not a fixed sleep.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = Open(dirs[i]).WaitEmpty(ctx)
			cancel()
		}
		if rerr != nil && rerr != unix.ENOENT {
			return &os.PathError{Op: "rmdir", Path: dirs[i], Err: rerr}
		}
	}
	return nil
}

// removeKnown removes the named children, then the group, and reports
// whether the group is gone. It stops at the first removal that fails
// for any reason but absence.
func (g *Group) removeKnown(known []string) bool {
	for _, k := range known {
		if err := unix.Rmdir(filepath.Join(g.Path, k)); err != nil && err != unix.ENOENT {
			return false
		}
	}
	err := unix.Rmdir(g.Path)
	return err == nil || err == unix.ENOENT
}

// DelegatedSubtree finds the outermost ancestor of the cgroup self (a path
// relative to the cgroup2 mount v2) that uid owns and can write: a subtree
// delegated to that user (chowned by an administrator, or by systemd with
// Delegate=yes). A group created below it shares that ancestor with the
// calling process, which is what the kernel requires to clone into it
// without privileges.
func DelegatedSubtree(v2, self string, uid int) (string, bool) {
	v2 = filepath.Clean(v2)
	best := ""
	for p := filepath.Join(v2, self); strings.HasPrefix(p, v2+"/"); p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Uid != uint32(uid) {
			break
		}
		if unix.Access(filepath.Join(p, "cgroup.procs"), unix.W_OK) != nil || unix.Access(p, unix.W_OK) != nil {
			break
		}
		best = p
	}
	return best, best != ""
}

// OnCgroupFS reports whether path is on a cgroup (v1 or v2) filesystem.
func OnCgroupFS(path string) bool {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC || st.Type == unix.CGROUP_SUPER_MAGIC
}
