package doctor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/storage"
)

// probeTimeout bounds each probe.
const probeTimeout = 10 * time.Second

// ProbePrefix starts the name of everything a probe creates, so leftovers
// are recognisable (and the cleanup check looks for exactly this run's).
const ProbePrefix = "hostfork-doctor-"

// prober runs the probes of one doctor run and remembers what they made.
type prober struct {
	f     *Facts
	n     Needs
	token string // ProbePrefix + random: every created name contains it
	// dirs are temporary directories the probes made (to check they are
	// gone afterwards).
	dirs []string
}

// RunProbes creates disposable owned resources, proves what the read
// checks inferred, removes everything it created (also when a probe
// fails), and finally checks that nothing with this run's name is left in
// the mount table, the cgroup parent or the temporary directories.
func RunProbes(ctx context.Context, f *Facts, n Needs) []Check {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	p := &prober{f: f, n: n, token: ProbePrefix + hex.EncodeToString(b)}
	cs := []Check{
		p.cgroup(ctx),
		p.mountNS(ctx),
		p.userNS(ctx),
		p.overlay(ctx),
		p.pidfd(ctx),
	}
	cs = append(cs, p.btrfs(ctx)...)
	cs = append(cs, p.hostShell(ctx), p.leftovers())
	return cs
}

func probeFail(c Check, what string, err error) Check {
	c.Status = Missing
	c.Detail = what + ": " + err.Error()
	c.Missing = cmp.Or(c.Missing, what)
	return c
}

// cgroup creates a group under the cgroup parent, clones a process into it
// (clone3 CLONE_INTO_CGROUP), checks it is there from birth, kills the
// group with cgroup.kill, waits for "populated 0" and removes the group.
// A parent that did not exist is created for the probe and removed after.
func (p *prober) cgroup(ctx context.Context) (c Check) {
	cg := p.f.Cgroup
	c = Check{ID: "probe.cgroup", Title: "cgroup2: create, clone a process into it, cgroup.kill, remove", Evidence: Probed, Required: p.n.Cgroup2}
	if cg.Parent == "" || !cg.ParentUnderV2 {
		c.Status, c.Detail = Skipped, "no cgroup parent to probe (see cgroup.delegation)"
		if c.Required {
			c.Status = Missing
		}
		return c
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return probeFail(c, "finding sleep", err)
	}
	start := time.Now()
	// Create the parent's missing components, remembering them.
	var made []string
	for d := cg.Parent; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	defer func() {
		for _, d := range made { // deepest first
			if err := unix.Rmdir(d); err != nil && err != unix.ENOENT && c.Status == OK {
				c.Status = Degraded
				c.Missing = "removing the parent it created: " + err.Error()
			}
		}
	}()
	for i := len(made) - 1; i >= 0; i-- {
		if err := unix.Mkdir(made[i], 0o755); err != nil {
			failed := made[i]
			made = made[i+1:] // only the ones created are removed
			return probeFail(c, "creating the cgroup parent "+cg.Parent, &os.PathError{Op: "mkdir", Path: failed, Err: err})
		}
	}
	dir := filepath.Join(cg.Parent, p.token)
	g, err := cgroup.Create(dir)
	if err != nil {
		return probeFail(c, "creating a cgroup", err)
	}
	defer func() {
		_ = g.Kill()
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.WaitEmpty(wctx)
		cancel()
		if err := g.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.Status = Missing
			c.Missing = "removing the probe's cgroup"
			c.Detail += "; removing " + dir + ": " + err.Error()
		}
	}()
	fd, err := g.OpenFD()
	if err != nil {
		return probeFail(c, "opening the cgroup", err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(sleep, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		return probeFail(c, "cloning a process into the cgroup", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	procs, err := g.Procs()
	if err != nil || !slices.Contains(procs, cmd.Process.Pid) {
		return probeFail(c, "checking membership", fmt.Errorf("process %d is not in %s/cgroup.procs (%v, %v)", cmd.Process.Pid, dir, procs, err))
	}
	if err := g.Kill(); err != nil {
		return probeFail(c, "cgroup.kill", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = g.WaitEmpty(wctx)
	cancel()
	if err != nil {
		return probeFail(c, "waiting for populated 0 after cgroup.kill", err)
	}
	werr := cmd.Wait()
	reaped = true
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return probeFail(c, "the cloned process's end", fmt.Errorf("want SIGKILL, got %v", werr))
	}
	if err := g.Remove(); err != nil {
		return probeFail(c, "removing the cgroup", err)
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("under %s: created %s, cloned a process into it, cgroup.kill ended it, removed it (%v)", cg.Parent, p.token, time.Since(start).Round(10*time.Microsecond))
	return c
}

// runChild runs argv with attr and a timeout, returning its error with its
// output.
func runChild(ctx context.Context, attr *syscall.SysProcAttr, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = attr
	cmd.Env = []string{"PATH=" + launchenv.DefaultPath, "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("%w: %s", err, s)
		}
		return err
	}
	return nil
}

// userNSAttr puts a child in a new user namespace mapping this user to
// root inside, and a new mount namespace.
func userNSAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		Unshareflags:               syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
}

// mountNS starts a child in a new mount namespace (the Go runtime makes its
// mounts private), as the keeper does.
func (p *prober) mountNS(ctx context.Context) Check {
	c := Check{ID: "probe.mount-namespace", Title: "private mount namespace (unshare -m)", Evidence: Probed, Required: p.n.View}
	t, err := exec.LookPath("true")
	if err != nil {
		return probeFail(c, "finding true", err)
	}
	start := time.Now()
	attr, how := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}, ""
	if os.Geteuid() != 0 {
		// Without root a view's mount namespace is inside a user
		// namespace of its own (decision 125).
		attr, how = userNSAttr(), ", inside a user namespace of its own as views without root are"
	}
	if err := runChild(ctx, attr, t); err != nil {
		c = probeFail(c, "starting a child in a new mount namespace", err)
		if os.Geteuid() != 0 {
			c.Missing = "a mount namespace without root (views without root need a user namespace)"
			c.Remedy = "see namespaces.user for the setting that forbids it, or run hostfork as root"
		}
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("a child started in its own private mount namespace%s (%v)", how, time.Since(start).Round(10*time.Microsecond))
	return c
}

// userNS starts a child in a new user namespace (this user mapped to root)
// with its own mount namespace.
func (p *prober) userNS(ctx context.Context) Check {
	c := Check{ID: "probe.user-namespace", Title: "user namespace with an id map, plus a mount namespace", Evidence: Probed}
	t, err := exec.LookPath("true")
	if err != nil {
		return probeFail(c, "finding true", err)
	}
	if err := runChild(ctx, userNSAttr(), t); err != nil {
		c = probeFail(c, "starting a child in a new user namespace", err)
		c.Remedy = "see namespaces.user for the sysctl or LSM rule that denies it"
		return c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("a child ran as root of its own user namespace (uid %d mapped to 0) with a private mount namespace", os.Geteuid())
	return c
}

// tempDir makes a probe directory in the store root when there is one
// (that is the filesystem trees use), else in the system's temporary
// directory.
func (p *prober) tempDir() (string, error) {
	base := os.TempDir()
	if s := p.f.Store; s.Exists && s.Writable {
		base = s.Root
	}
	d, err := os.MkdirTemp(base, p.token+"-")
	if err == nil {
		p.dirs = append(p.dirs, d)
	}
	return d, err
}

// overlay mounts an overlay inside a child's private mount namespace (in a
// user namespace when not root), checks that the lower shows through and
// that a write lands in the upper, and lets the namespace die with the
// child; the host never sees the mount.
func (p *prober) overlay(ctx context.Context) (c Check) {
	c = Check{ID: "probe.overlay", Title: "overlay mount in a private mount namespace", Evidence: Probed, Required: p.n.Overlay}
	mountBin, err := exec.LookPath("mount")
	if err != nil {
		c.Status, c.Detail = Skipped, "mount(8) not found (install util-linux)"
		if c.Required {
			c.Status = Missing
		}
		return c
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return probeFail(c, "finding sh", err)
	}
	dir, err := p.tempDir()
	if err != nil {
		return probeFail(c, "making a probe directory", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			c.Status = Missing
			c.Missing = "removing the probe directory"
			c.Detail += "; removing " + dir + ": " + err.Error()
		}
	}()
	parts := map[string]string{}
	for _, n := range []string{"lower", "upper", "work", "merged"} {
		parts[n] = filepath.Join(dir, n)
		if err := os.Mkdir(parts[n], 0o755); err != nil {
			return probeFail(c, "making the overlay's directories", err)
		}
	}
	if err := os.WriteFile(filepath.Join(parts["lower"], "from-lower"), []byte("x"), 0o644); err != nil {
		return probeFail(c, "writing the lower", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", storage.EscapeOverlayPath(parts["lower"]),
		storage.EscapeOverlayPath(parts["upper"]), storage.EscapeOverlayPath(parts["work"]))
	script := `"$1" -t overlay overlay -o "$2" "$3" && test -f "$3/from-lower" && echo x > "$3/written" && test -f "$4/written"`
	attr := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	how := "in a private mount namespace"
	if os.Geteuid() != 0 {
		attr, how = userNSAttr(), "in a user namespace's private mount namespace"
	}
	start := time.Now()
	if err := runChild(ctx, attr, sh, "-c", script, "sh", mountBin, opts, parts["merged"], parts["upper"]); err != nil {
		c = probeFail(c, "mounting an overlay "+how, err)
		c.Remedy = "modprobe overlay (and see namespaces.mount)"
		return c
	}
	elapsed := time.Since(start)
	if mountedAt(parts["merged"]) {
		c.Status = Missing
		c.Detail = "the overlay mount is visible on the host: the namespace's mounts were not private"
		c.Missing = "mount isolation"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("overlay on %s mounted %s: the lower showed through, a write went to the upper, the host saw no mount (%v)",
		p.fsOf(dir), how, elapsed.Round(10*time.Microsecond))
	return c
}

func (p *prober) fsOf(path string) string {
	var sf unix.Statfs_t
	if unix.Statfs(path, &sf) != nil {
		return "?"
	}
	return storage.FSName(int64(sf.Type))
}

func mountedAt(path string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return slices.ContainsFunc(ParseMountinfo(string(b)), func(m Mount) bool { return m.Target == path })
}

// pidfd opens a pidfd on a child, signals through it, sees it poll
// readable at exit and get ESRCH once reaped.
func (p *prober) pidfd(ctx context.Context) Check {
	c := Check{ID: "probe.pidfd", Title: "pidfd: open, signal, poll exit", Evidence: Probed, Required: true}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return probeFail(c, "finding sleep", err)
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		return probeFail(c, "starting a child", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		return probeFail(c, "pidfd_open", os.NewSyscallError("pidfd_open", err))
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return probeFail(c, "pidfd_send_signal", os.NewSyscallError("pidfd_send_signal", err))
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return probeFail(c, "polling the pidfd for exit", fmt.Errorf("no readiness (%v)", err))
		}
		break
	}
	_ = cmd.Wait()
	reaped = true
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != unix.ESRCH {
		return probeFail(c, "signalling a reaped process", fmt.Errorf("want ESRCH, got %v", err))
	}
	c.Status, c.Detail = OK, "pidfd_open, pidfd_send_signal, poll on exit and ESRCH after reaping all work"
	return c
}

// btrfsRoots are the writable btrfs storage roots (the store, pools).
func (p *prober) btrfsRoots() []StorageRoot {
	var out []StorageRoot
	seen := map[string]bool{}
	for _, r := range p.f.Storage {
		if r.Role == "baseline" || r.FSType != "btrfs" || !r.Exists || seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		out = append(out, r)
	}
	return out
}

// btrfs, per btrfs storage root: creates a subvolume in a probe directory,
// snapshots it with hostfork's btrfs backend, removes the snapshot (as a
// non-root owner that needs user_subvol_rm_allowed; without it the empty
// snapshot is removed with rmdir and the probe says so), then the
// subvolume and the directory.
func (p *prober) btrfs(ctx context.Context) []Check {
	roots := p.btrfsRoots()
	if len(roots) == 0 {
		c := Check{ID: "probe.btrfs", Title: "btrfs snapshot", Evidence: Probed, Status: Skipped, Required: p.n.Btrfs}
		c.Detail = "no btrfs storage root: the store is on " + cmp.Or(p.f.Store.FSType, "an unknown filesystem") + " and no btrfs baseline is registered"
		return []Check{c}
	}
	var cs []Check
	for _, r := range roots {
		cs = append(cs, p.btrfsAt(ctx, r))
	}
	return cs
}

func (p *prober) btrfsAt(ctx context.Context, r StorageRoot) (c Check) {
	c = Check{ID: "probe.btrfs." + strings.ReplaceAll(r.Role, " ", "-"), Title: "btrfs snapshot in " + r.Path, Evidence: Probed, Required: p.n.Btrfs}
	if r.For != "" {
		c.ID += "." + r.For
	}
	if !r.Writable {
		c.Status, c.Detail = Skipped, r.Path+" is not writable by this user"
		return c
	}
	dir, err := os.MkdirTemp(r.Path, "."+p.token+"-")
	if err != nil {
		return probeFail(c, "making a probe directory", err)
	}
	p.dirs = append(p.dirs, dir)
	src := filepath.Join(dir, "src")
	var leftovers []string
	defer func() {
		for _, l := range leftovers {
			_ = os.Remove(l)
		}
		// An empty subvolume goes with rmdir, also for its non-root owner.
		_ = os.Remove(filepath.Join(src, "probe"))
		if err := unix.Rmdir(src); err != nil && err != unix.ENOENT {
			c.Status, c.Missing = Missing, "removing the probe subvolume"
			c.Detail += "; rmdir " + src + ": " + err.Error()
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.Status, c.Missing = Missing, "removing the probe directory"
			c.Detail += "; " + err.Error()
		}
	}()
	start := time.Now()
	if err := storage.CreateSubvolume(src); err != nil {
		return probeFail(c, "creating a subvolume", err)
	}
	if err := os.WriteFile(filepath.Join(src, "probe"), []byte("x"), 0o644); err != nil {
		return probeFail(c, "writing into the subvolume", err)
	}
	t, err := storage.Btrfs{}.Prepare(ctx, storage.Request{Dest: filepath.Join(dir, "snap"), Source: src})
	if err != nil {
		return probeFail(c, "snapshotting it", err)
	}
	if _, err := os.Stat(filepath.Join(t.Path, "probe")); err != nil {
		leftovers = append(leftovers, filepath.Join(t.Path, "probe"), t.Path, t.Dest)
		return probeFail(c, "reading the snapshot", err)
	}
	err = storage.Btrfs{}.Remove(ctx, t)
	switch {
	case err == nil:
		c.Status = OK
		c.Detail = fmt.Sprintf("on %s (mount %s): created a subvolume, snapshotted it with hostfork's backend and destroyed the snapshot (%v)",
			r.Path, r.MountPoint, time.Since(start).Round(10*time.Microsecond))
	case errors.Is(err, storage.ErrRemoveNotPermitted):
		// Empty it and rmdir it, which its owner may do.
		leftovers = append(leftovers, filepath.Join(t.Path, "probe"), t.Path, t.Dest)
		c.Status = Degraded
		c.Detail = "snapshots work, but destroying one was refused: " + err.Error()
		c.Missing = "non-root deletion of snapshots"
		c.Remedy = "mount -o remount,user_subvol_rm_allowed " + r.MountPoint + " (and add user_subvol_rm_allowed to its options in /etc/fstab)"
	default:
		leftovers = append(leftovers, filepath.Join(t.Path, "probe"), t.Path, t.Dest)
		return probeFail(c, "destroying the snapshot", err)
	}
	return c
}

// hostShell captures the login shell's environment once (without caching
// it), to show what the host-shell and toolchain policies would get.
func (p *prober) hostShell(ctx context.Context) Check {
	c := Check{ID: "probe.host-shell", Title: "login-shell capture", Evidence: Probed}
	acct, err := launchenv.CurrentAccount()
	if err != nil {
		return probeFail(c, "looking up the user", err)
	}
	shell, _ := launchenv.LoginShell(acct)
	start := time.Now()
	s, err := launchenv.Capture(ctx, shell, acct, os.Environ(), launchenv.DefaultCaptureTimeout)
	if err != nil {
		c.Status = Degraded
		c.Detail = err.Error()
		c.Missing = "a working login-shell capture: host-shell and toolchain would use the inherited environment"
		c.Remedy = "fix the shell's startup files, or point " + launchenv.LoginShellEnv + " at a shell that starts cleanly"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("%s -l -c gave %d variables in %v", shell, len(s.Env), time.Since(start).Round(time.Millisecond))
	return c
}

// leftovers checks that no mount, cgroup or directory with this run's name
// remains.
func (p *prober) leftovers() Check {
	c := Check{ID: "probe.cleanup", Title: "everything the probes created is gone", Evidence: Probed}
	var left []string
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, m := range ParseMountinfo(string(b)) {
		if strings.Contains(m.Target, p.token) {
			left = append(left, "mount "+m.Target)
		}
	}
	if cg := p.f.Cgroup.Parent; cg != "" {
		if ents, err := os.ReadDir(cg); err == nil {
			for _, e := range ents {
				if strings.Contains(e.Name(), p.token) {
					left = append(left, "cgroup "+filepath.Join(cg, e.Name()))
				}
			}
		}
		if !p.f.Cgroup.ParentExists {
			if _, err := os.Stat(cg); err == nil {
				left = append(left, "cgroup parent "+cg+" (it did not exist before; a concurrent hostfork may have created it)")
			}
		}
	}
	for _, d := range p.dirs {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, "directory "+d)
		}
	}
	if len(left) == 0 {
		c.Status, c.Detail = OK, "no mount, cgroup or directory named "+p.token+" remains"
		return c
	}
	c.Status = Missing
	c.Detail = "left behind: " + strings.Join(left, "; ")
	c.Missing = "complete cleanup"
	c.Remedy = "remove them by hand (umount, rmdir); please report this as a hostfork bug"
	return c
}
