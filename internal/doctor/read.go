package doctor

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
)

// ReadOptions say where to look.
type ReadOptions struct {
	// Root is the store root (already resolved); RootSource says where it
	// came from (--root, $HOSTFORK_ROOT, default).
	Root       string
	RootSource string
	// CgroupParent is the configured parent ("" = $HOSTFORK_CGROUP_PARENT,
	// else <cgroup2 mount>/hostfork for root), the library's rule.
	CgroupParent string
	// Exe and Version identify this binary (Version as `hostfork version
	// --json` prints "version" and "commit": "v1.2.3 abcdef").
	Exe     string
	Version string
	// Companion is the companion binary 'serve' and 'mcp' execute, as the
	// CLI found and checked it ("" not found); CompanionErr says why not.
	Companion    string
	CompanionErr string
	// UnitDirs override where support units are looked for (tests).
	UnitDirs []string
	// Verbs are the CLI's verb names.
	Verbs map[string]bool
}

// ReadFacts reads the host without changing it. (pidfd_open on itself is
// the one system call that creates something: a descriptor, closed at
// once.)
func ReadFacts(ctx context.Context, o ReadOptions) *Facts {
	f := &Facts{EUID: os.Geteuid(), Exe: o.Exe, Version: o.Version, Verbs: o.Verbs, Companion: o.Companion, CompanionErr: o.CompanionErr}
	if acct, err := launchenv.CurrentAccount(); err == nil {
		f.User = acct.Name
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		f.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		f.BootID = strings.TrimSpace(string(b))
	} else {
		f.BootErr = err.Error()
	}
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		unix.Close(fd)
		f.PidfdOK = true
	} else {
		f.PidfdErr = os.NewSyscallError("pidfd_open", err).Error()
	}
	f.Filesystems = linux.Filesystems()
	mtxt, _ := os.ReadFile("/proc/self/mountinfo")
	mounts := ParseMountinfo(string(mtxt))
	f.Cgroup = readCgroup(mounts, o.CgroupParent, f.EUID)
	f.Systemd = readSystemd(ctx, f.EUID)
	f.NS = readNamespaces(mounts, f.User)
	f.Store = readStore(ctx, o.Root, o.RootSource)
	f.Storage = readStorageRoots(mounts, f.Store)
	f.Units = readUnits(ctx, o)
	f.HostShell = readHostShell(o.Root)
	return f
}

func readWords(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

func readCgroup(mounts []Mount, parent string, euid int) CgroupFacts {
	var c CgroupFacts
	v2, ro, v1 := CgroupHierarchies(mounts)
	c.V1 = v1
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				c.Self = strings.TrimSpace(p)
			}
		}
	}
	if v2 == "" {
		return c
	}
	c.V2Mount = v2
	c.V2Writable = !ro && unix.Access(v2, unix.W_OK) == nil
	c.V2RootControls = readWords(filepath.Join(v2, "cgroup.controllers"))
	c.ParentSource = "--cgroup-parent"
	if parent == "" {
		parent, c.ParentSource = os.Getenv("HOSTFORK_CGROUP_PARENT"), "$HOSTFORK_CGROUP_PARENT"
	}
	if parent == "" && euid == 0 {
		parent, c.ParentSource = filepath.Join(v2, "hostfork"), "default for root"
	}
	if parent == "" {
		if d, ok := cgroup.DelegatedSubtree(v2, c.Self, euid); ok {
			parent, c.ParentSource = filepath.Join(d, "hostfork"), "delegated to this user: the outermost owned ancestor of this process's cgroup"
		}
	}
	if parent == "" {
		c.ParentSource = ""
		return c
	}
	c.Parent = filepath.Clean(parent)
	c.ParentUnderV2 = within(filepath.Clean(v2), c.Parent) && c.Parent != filepath.Clean(v2)
	common := filepath.Join(v2, c.Self)
	for !within(common, c.Parent) && common != "/" {
		common = filepath.Dir(common)
	}
	c.CommonWritable = unix.Access(filepath.Join(common, "cgroup.procs"), unix.W_OK) == nil
	if st, err := os.Stat(c.Parent); err == nil && st.IsDir() {
		c.ParentExists = true
		c.ParentWritable = unix.Access(c.Parent, unix.W_OK) == nil
		c.ParentControls = readWords(filepath.Join(c.Parent, "cgroup.controllers"))
		c.ParentSubtree = readWords(filepath.Join(c.Parent, "cgroup.subtree_control"))
		_, err := os.Stat(filepath.Join(c.Parent, "cgroup.kill"))
		c.KillFile, c.KillFileChecked = err == nil, true
	} else {
		// EnsureParent would create it: the nearest existing ancestor
		// must be writable.
		anc := filepath.Dir(c.Parent)
		for {
			if _, err := os.Stat(anc); err == nil || anc == "/" {
				break
			}
			anc = filepath.Dir(anc)
		}
		c.ParentWritable = !ro && unix.Access(anc, unix.W_OK) == nil
		c.ParentControls = readWords(filepath.Join(anc, "cgroup.subtree_control"))
	}
	return c
}

func readSystemd(ctx context.Context, euid int) SystemdFacts {
	var s SystemdFacts
	if b, err := os.ReadFile("/proc/1/comm"); err == nil {
		s.PID1Comm = strings.TrimSpace(string(b))
	}
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		s.Booted = true
	}
	if p, err := exec.LookPath("systemctl"); err == nil {
		s.Systemctl = p
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := exec.CommandContext(cctx, p, "--version").Output()
		cancel()
		if err != nil {
			s.VersionErr = err.Error()
		} else if v, ok := SystemdVersion(string(out)); ok {
			s.Version = v
		} else {
			s.VersionErr = "unrecognized output: " + firstLine(string(out))
		}
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		rt = fmt.Sprintf("/run/user/%d", euid)
	}
	if _, err := os.Stat(filepath.Join(rt, "systemd", "private")); err == nil {
		s.UserManager = true
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func readIntPtr(path string) *int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return &v
}

func readNamespaces(mounts []Mount, user string) NamespaceFacts {
	n := NamespaceFacts{MaxUserNS: -1}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				if caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil {
					n.CapSysAdmin = caps&(1<<unix.CAP_SYS_ADMIN) != 0
				}
			}
		}
	}
	if v := readIntPtr("/proc/sys/user/max_user_namespaces"); v != nil {
		n.MaxUserNS = *v
	}
	n.UnprivUserns = readIntPtr("/proc/sys/kernel/unprivileged_userns_clone")
	n.AppArmorRestrict = readIntPtr("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil {
		n.AppArmor = strings.TrimSpace(string(b)) == "Y"
	}
	if v := readIntPtr("/sys/fs/selinux/enforce"); v != nil {
		n.SELinux = map[bool]string{true: "enforcing", false: "permissive"}[*v == 1]
	}
	n.Newuidmap, _ = exec.LookPath("newuidmap")
	n.Newgidmap, _ = exec.LookPath("newgidmap")
	n.SubUID = hasSubID("/etc/subuid", user, os.Geteuid())
	n.SubGID = hasSubID("/etc/subgid", user, os.Geteuid())
	if m, ok := MountOf(mounts, "/"); ok {
		n.RootPropagation = Propagation(m)
	}
	for _, m := range mounts {
		if Propagation(m) == "shared" {
			n.SharedMounts++
		}
	}
	return n
}

func hasSubID(path, user string, uid int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		who, _, _ := strings.Cut(sc.Text(), ":")
		if who != "" && (who == user || who == strconv.Itoa(uid)) {
			return true
		}
	}
	return false
}

// readStore looks at the store without creating or migrating it: the
// registry is opened read-only.
func readStore(ctx context.Context, root, source string) StoreFacts {
	s := StoreFacts{Root: root, RootSource: source, BinarySchema: registry.SchemaVersion}
	if root == "" {
		s.Err = "no store root"
		return s
	}
	dir := root
	if st, err := os.Stat(root); err == nil {
		if !st.IsDir() {
			s.Err = root + " is not a directory"
			return s
		}
		s.Exists = true
	} else {
		for {
			dir = filepath.Dir(dir)
			if _, err := os.Stat(dir); err == nil || dir == "/" {
				break
			}
		}
	}
	s.Writable = unix.Access(dir, unix.W_OK|unix.X_OK) == nil
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err == nil {
		s.FSType = storage.FSName(int64(sf.Type))
		s.FreeBytes = sf.Bavail * uint64(sf.Bsize)
		s.TotalBytes = sf.Blocks * uint64(sf.Bsize)
	}
	if !s.Exists {
		return s
	}
	path := filepath.Join(root, registry.FileName)
	if _, err := os.Stat(path); err != nil {
		return s
	}
	s.Registry = true
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "5000")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		s.Err = err.Error()
		return s
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&s.Schema); err != nil {
		s.Err = fmt.Sprintf("reading %s: %v", path, err)
		return s
	}
	if s.Schema > s.BinarySchema {
		return s // a newer layout: don't guess at its tables
	}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM intents WHERE state = ?", registry.IntentPending).Scan(&s.PendingIntents); err != nil {
		s.Err = fmt.Sprintf("reading the intent ledger: %v", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT data FROM baselines ORDER BY name")
	if err != nil {
		return s // an older schema without baselines
	}
	defer rows.Close()
	for rows.Next() {
		var data []byte
		var b api.Baseline
		if rows.Scan(&data) == nil && json.Unmarshal(data, &b) == nil {
			s.Baselines = append(s.Baselines, BaselineFact{Name: b.Name, Path: b.Path, Kind: b.Kind})
		}
	}
	return s
}

// readStorageRoots describes the store root (overlay upper/work and copies
// go under it) and, per registered baseline, the baseline and — for a btrfs
// subvolume — the directory its snapshots go in (the baseline's parent;
// see hostfork's treeDest).
func readStorageRoots(mounts []Mount, s StoreFacts) []StorageRoot {
	var out []StorageRoot
	if s.Root != "" {
		out = append(out, inspectRoot(mounts, s.Root, "store", ""))
	}
	for _, b := range s.Baselines {
		out = append(out, inspectRoot(mounts, b.Path, "baseline", b.Name))
		if b.Kind == "btrfs-subvolume" {
			out = append(out, inspectRoot(mounts, filepath.Dir(b.Path), "btrfs pool", b.Name))
		}
	}
	return out
}

func inspectRoot(mounts []Mount, path, role, forName string) StorageRoot {
	r := StorageRoot{Path: path, Role: role, For: forName}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		r.Err = err.Error()
		return r
	}
	r.Exists = true
	r.Owner = st.Uid
	r.Mode = fmt.Sprintf("%04o", st.Mode&0o7777)
	r.Writable = unix.Access(path, unix.W_OK|unix.X_OK) == nil
	r.Readable = unix.Access(path, unix.R_OK|unix.X_OK) == nil
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err == nil {
		r.FSType = storage.FSName(int64(sf.Type))
		r.FreeBytes = sf.Bavail * uint64(sf.Bsize)
	}
	resolved := path
	if p, err := filepath.EvalSymlinks(path); err == nil {
		resolved = p
	}
	if m, ok := MountOf(mounts, resolved); ok {
		r.MountPoint = m.Target
		r.SuperOpts = m.SuperOpts
	}
	return r
}

// DefaultUnitDirs are where support units are installed: the system's
// administrator directory and this user's.
func DefaultUnitDirs() []string {
	dirs := []string{"/etc/systemd/system"}
	if cfg := os.Getenv("XDG_CONFIG_HOME"); cfg != "" && filepath.IsAbs(cfg) {
		dirs = append(dirs, filepath.Join(cfg, "systemd", "user"))
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".config", "systemd", "user"))
	}
	return dirs
}

func readUnits(ctx context.Context, o ReadOptions) UnitFacts {
	u := UnitFacts{Dirs: o.UnitDirs}
	if u.Dirs == nil {
		u.Dirs = DefaultUnitDirs()
	}
	for _, d := range u.Dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "hostfork") || e.IsDir() {
				continue
			}
			u.Found = append(u.Found, inspectUnit(ctx, filepath.Join(d, e.Name()), o))
		}
	}
	return u
}

// ExecStartBinary returns the program of a unit's first ExecStart= line,
// without systemd's prefixes (-, @, +, !, :).
func ExecStartBinary(unitText string) (line, binary string) {
	for _, l := range strings.Split(unitText, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart=")
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		v = strings.TrimSpace(v)
		prog := strings.TrimLeft(v, "-@+!:")
		if q := prog[:min(1, len(prog))]; q == `"` || q == "'" {
			if end := strings.Index(prog[1:], q); end >= 0 {
				return v, prog[1 : 1+end]
			}
		}
		if f := strings.Fields(prog); len(f) > 0 {
			return v, f[0]
		}
	}
	return "", ""
}

// unitKey returns the value of the first "key=" line of a unit file.
func unitKey(text, key string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func inspectUnit(ctx context.Context, path string, o ReadOptions) UnitFile {
	uf := UnitFile{Path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		uf.Err = err.Error()
		return uf
	}
	uf.ExecStart, uf.Binary = ExecStartBinary(string(b))
	uf.Root = unitKey(string(b), "X-Hostfork-Root")
	uf.RecordedVersion = unitKey(string(b), "X-Hostfork-Version")
	if uf.Binary == "" {
		return uf // a timer or a template without a command of its own
	}
	var a, e unix.Stat_t
	if err := unix.Stat(uf.Binary, &a); err != nil {
		return uf
	}
	uf.BinaryExists = true
	if o.Exe != "" && unix.Stat(o.Exe, &e) == nil && a.Dev == e.Dev && a.Ino == e.Ino {
		uf.SameExe = true
		return uf
	}
	// Another binary: ask it which version it is.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, uf.Binary, "version", "--json").Output()
	if err != nil {
		uf.Err = "running " + uf.Binary + " version --json: " + err.Error()
		return uf
	}
	var v struct {
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &v); err != nil {
		uf.Err = uf.Binary + " version --json: " + err.Error()
		return uf
	}
	uf.Version = v.Version + " " + v.Commit
	return uf
}

func readHostShell(root string) HostShellFacts {
	var h HostShellFacts
	acct, err := launchenv.CurrentAccount()
	if err != nil {
		h.Err = err.Error()
		return h
	}
	h.Shell, h.ShellSource = launchenv.LoginShell(acct)
	if root == "" {
		return h
	}
	s, err := launchenv.LoadCache(filepath.Join(root, "cache"))
	if err != nil {
		h.Err = err.Error()
		return h
	}
	if s == nil {
		return h
	}
	h.Cached, h.CapturedAt = true, s.CapturedAt
	h.Fresh, h.StaleReason = launchenv.Fresh(s, h.Shell, acct, time.Now(), launchenv.DefaultMaxAge, launchenv.ModTimes(launchenv.StartupFiles(acct.Home, h.Shell)))
	return h
}
