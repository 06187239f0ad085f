package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/moby/sys/mountinfo"
)

// NspawnOptions configure BootSystemd.
type NspawnOptions struct {
	// Binds are host paths bound read-write into the container, in
	// systemd-nspawn's --bind= syntax: "PATH" (the same path inside) or
	// "SRC:DST".
	Binds []string
	// ReadOnlyBinds are bound read-only (--bind-ro=), e.g. a test binary:
	// "SRC:/usr/local/bin/hostfork".
	ReadOnlyBinds []string
	// BootTimeout bounds reaching "running" or "degraded" (default 60 s).
	BootTimeout time.Duration
}

// Nspawn is a real systemd booted in a throwaway systemd-nspawn container
// (HOST-NOTES, "A real systemd for tests"): an overlay of the host's / with
// a fresh upper layer, its own machine id, host services masked, a private
// network, in cgroups of its own. It is torn down when the test ends, also
// when it fails.
type Nspawn struct {
	Name string
	// Dir holds upper/, work/, root/ (the overlay: the container's /) and
	// nspawn.log.
	Dir  string
	Root string
	// NspawnPID is the systemd-nspawn process; InitPID the container's
	// init (systemd), both as the host numbers them.
	NspawnPID int
	InitPID   int
	// BootTime is from starting systemd-nspawn to is-system-running
	// answering running or degraded.
	BootTime time.Duration
	// Masked lists the host units masked inside.
	Masked []string
	// Cgroup is the cgroup2 group the container runs in (its payload/ and
	// supervisor/ are below it).
	Cgroup string
}

// unitsToMask are host services that must not start a second time inside
// the container (HOST-NOTES); only those that exist are masked.
var unitsToMask = []string{
	"postgresql.service", "e2scrub_reap.service", "systemd-timesyncd.service", "console-getty.service",
	"docker.service", "docker.socket", "containerd.service", "ssh.service", "cron.service",
}

// BootSystemd boots systemd in a container and waits until it is running.
// It skips (failing under HOSTFORK_TEST_STRICT=1) when not root or when
// systemd-nspawn (Debian package systemd-container), nsenter or a writable
// cgroup2 mount is missing.
//
// systemd-nspawn is started with SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 and
// --register=no --keep-unit (there is no host systemd to register with),
// from a process that is already in fresh child cgroups of its own in the
// cgroup2 mount and in every v1 hierarchy. At cleanup it is sent SIGTERM
// (a clean poweroff) and SIGKILL if it does not end in time; then whatever
// is left in its cgroups is killed, the cgroups (with nspawn's payload/
// and supervisor/) are removed, the overlay is unmounted, nspawn's own
// leftovers in /run/systemd/nspawn are removed and the directory is
// deleted.
func BootSystemd(t testing.TB, opts NspawnOptions) *Nspawn {
	t.Helper()
	RequireRoot(t)
	nspawnBin, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		Skip(t, "systemd-nspawn not found (apt-get install systemd-container)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		Skip(t, "nsenter not found (apt-get install util-linux)")
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 60 * time.Second
	}
	unified, err := cgroup.FindMount()
	if err != nil {
		Skip(t, err.Error())
	}

	sweepStaleNspawn(t)
	n := &Nspawn{Name: "hf-" + randomHex(5)}
	var groups []string // cgroup directories made for the container, cgroup2 first
	var mounted bool
	var cmd *exec.Cmd
	waited := make(chan struct{})
	var runLock *os.File

	t.Cleanup(func() {
		if cmd != nil && cmd.Process != nil {
			start := time.Now()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-waited:
				t.Logf("nspawn %s: powered off in %v", n.Name, time.Since(start).Round(time.Millisecond))
			case <-time.After(20 * time.Second):
				t.Errorf("nspawn %s: no clean poweroff within 20s of SIGTERM; killing it", n.Name)
				_ = cmd.Process.Kill()
				select {
				case <-waited:
				case <-time.After(5 * time.Second):
					t.Errorf("nspawn %s: pid %d did not exit after SIGKILL", n.Name, n.NspawnPID)
				}
			}
		}
		if t.Failed() && n.Dir != "" {
			if b, err := os.ReadFile(filepath.Join(n.Dir, "nspawn.log")); err == nil {
				t.Logf("nspawn %s log (tail):\n%s", n.Name, tail(b, 40))
			}
		}
		// Anything still in the container's cgroups: the init if nspawn
		// was killed, processes tests moved into its scopes.
		if len(groups) > 0 {
			g := cgroup.Open(groups[0])
			if g.Exists() {
				_ = g.Kill()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := g.WaitEmpty(ctx); err != nil {
					t.Errorf("nspawn %s cleanup: %s did not empty: %v", n.Name, groups[0], err)
				}
				cancel()
			}
		}
		for _, gp := range groups {
			if err := removeCgroupDirs(gp); err != nil {
				t.Errorf("nspawn %s cleanup: %v", n.Name, err)
			}
		}
		removeNspawnRun(t, n.Name, runLock)
		if mounted {
			if err := unmountRetrying(n.Root); err != nil {
				t.Errorf("nspawn %s cleanup: unmounting %s: %v (left %s in place)", n.Name, n.Root, err, n.Dir)
				return
			}
		}
		if n.Dir != "" {
			if err := removeNspawnDir(n.Dir); err != nil {
				t.Errorf("nspawn %s cleanup: %v", n.Name, err)
			}
		}
	})

	n.Dir, err = os.MkdirTemp("", "hostfork-nspawn-")
	if err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	upper, work := filepath.Join(n.Dir, "upper"), filepath.Join(n.Dir, "work")
	n.Root = filepath.Join(n.Dir, "root")
	n.Cgroup = filepath.Join(unified.Path, cgroup.SelfPath(), "hostfork-nspawn-"+n.Name)
	v1, err := v1Hierarchies()
	if err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	owner, err := linux.IdentityOf(os.Getpid())
	if err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	rec := ownerRecord{Owner: owner, Name: n.Name, Cgroups: []string{n.Cgroup}}
	for _, h := range v1 {
		rec.Cgroups = append(rec.Cgroups, filepath.Join(h.dir, "hostfork-nspawn-"+n.Name))
	}
	if b, err := json.Marshal(rec); err != nil {
		t.Fatalf("nspawn: %v", err)
	} else if err := os.WriteFile(filepath.Join(n.Dir, "owner.json"), b, 0o644); err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	for _, d := range []string{upper, work, n.Root, filepath.Join(upper, "etc", "systemd", "system")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("nspawn: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(upper, "etc", "machine-id"), []byte(randomHex(16)+"\n"), 0o444); err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	for _, u := range unitsToMask {
		if !unitExists(u) {
			continue
		}
		if err := os.Symlink("/dev/null", filepath.Join(upper, "etc", "systemd", "system", u)); err != nil {
			t.Fatalf("nspawn: masking %s: %v", u, err)
		}
		n.Masked = append(n.Masked, u)
	}
	if err := unix.Mount("overlay", n.Root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		Skip(t, "can't mount an overlay of / for the container: "+err.Error())
	}
	mounted = true

	// Fresh child cgroups for the nspawn process: cgroup2 (joined at
	// clone time) and every v1 hierarchy (joined by the wrapper shell
	// before it becomes systemd-nspawn).
	if _, err := cgroup.Create(n.Cgroup); err != nil {
		Skip(t, "can't create a cgroup for the container: "+err.Error())
	}
	groups = append(groups, n.Cgroup)
	var procsFiles []string
	for _, h := range v1 {
		p := filepath.Join(h.dir, "hostfork-nspawn-"+n.Name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatalf("nspawn: creating v1 cgroup: %v", err)
		}
		groups = append(groups, p)
		if h.cpuset {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h.dir, f))
				if err == nil && len(bytes.TrimSpace(b)) == 0 {
					b, err = os.ReadFile(filepath.Join(h.dir, strings.Replace(f, "cpuset.", "cpuset.effective_", 1)))
				}
				if err == nil {
					err = os.WriteFile(filepath.Join(p, f), b, 0)
				}
				if err != nil {
					t.Fatalf("nspawn: preparing cpuset cgroup %s: %v", p, err)
				}
			}
		}
		procsFiles = append(procsFiles, filepath.Join(p, "cgroup.procs"))
	}

	// Hold /run shared for the container's lifetime; see removeNspawnRun.
	runLock = lockRunShared(t)

	logf, err := os.Create(filepath.Join(n.Dir, "nspawn.log"))
	if err != nil {
		t.Fatalf("nspawn: %v", err)
	}
	defer logf.Close()
	cgfd, err := unix.Open(n.Cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("nspawn: opening %s: %v", n.Cgroup, err)
	}
	defer unix.Close(cgfd)
	args := []string{"-c", `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`, "sh"}
	args = append(args, procsFiles...)
	args = append(args, "--", nspawnBin, "-D", n.Root, "-M", n.Name, "--register=no", "--keep-unit",
		"--private-network", "--console=passive", "-b")
	for _, b := range opts.Binds {
		args = append(args, "--bind="+b)
	}
	for _, b := range opts.ReadOnlyBinds {
		args = append(args, "--bind-ro="+b)
	}
	args = append(args, "systemd.unit=multi-user.target")
	cmd = exec.Command("/bin/sh", args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		UseCgroupFD: true, CgroupFD: cgfd,
		Setsid: true,
		// If the test binary dies without cleanup, the container still
		// powers off.
		Pdeathsig: syscall.SIGTERM,
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		cmd = nil
		t.Fatalf("nspawn: starting systemd-nspawn: %v", err)
	}
	n.NspawnPID = cmd.Process.Pid
	go func() { _ = cmd.Wait(); close(waited) }()

	deadline := time.Now().Add(opts.BootTimeout)
	state := ""
	for {
		select {
		case <-waited:
			t.Fatalf("nspawn %s: systemd-nspawn exited during boot (%v)", n.Name, cmd.ProcessState)
		default:
		}
		if n.InitPID == 0 {
			n.InitPID = findInit(n.NspawnPID)
		}
		if n.InitPID != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, _ := n.Command(ctx, "systemctl", "is-system-running").Output()
			cancel()
			state = strings.TrimSpace(string(out))
			if state == "running" || state == "degraded" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nspawn %s: not running after %v (state %q, init pid %d)", n.Name, opts.BootTimeout, state, n.InitPID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.BootTime = time.Since(start)
	if state == "degraded" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, _ := n.Command(ctx, "systemctl", "--failed", "--no-legend", "--plain").CombinedOutput()
		cancel()
		t.Logf("nspawn %s: degraded; failed units:\n%s", n.Name, out)
	}
	t.Logf("nspawn %s: systemd %s in %v (init pid %d, masked %v)", n.Name, state, n.BootTime.Round(time.Millisecond), n.InitPID, n.Masked)
	return n
}

// Command runs argv inside the container: nsenter -t INIT -a -- argv. It
// joins every namespace of the container's init (the mount namespace
// makes / and the working directory the container's).
func (n *Nspawn) Command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"-t", strconv.Itoa(n.InitPID), "-a", "--"}, argv...)
	return exec.CommandContext(ctx, "nsenter", args...)
}

// Run runs argv inside the container, fails the test if it fails, and
// returns its combined output.
func (n *Nspawn) Run(t testing.TB, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := n.Command(ctx, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("in container %s: %s: %v\n%s", n.Name, strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// BusSocket is the container's system bus socket as the host reaches it.
// (Its manager's private socket, /run/systemd/private, is not reachable
// from the host: the connection breaks unless the caller is in the
// container's PID namespace.)
func (n *Nspawn) BusSocket() string {
	return fmt.Sprintf("/proc/%d/root/run/dbus/system_bus_socket", n.InitPID)
}

// Path is a path inside the container as the host reaches it.
func (n *Nspawn) Path(inside string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.InitPID), inside)
}

// findInit returns the container's init: the child of systemd-nspawn that
// is PID 1 of its own PID namespace, or 0.
func findInit(nspawnPID int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", nspawnPID))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				continue
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(st), "\n") {
				if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
					f := strings.Fields(rest)
					if len(f) >= 2 && f[len(f)-1] == "1" {
						return pid
					}
				}
			}
		}
	}
	return 0
}

type v1Hierarchy struct {
	dir    string // this process's group in it, as a path
	cpuset bool
}

// v1Hierarchies lists this process's groups in the mounted cgroup v1
// hierarchies (controllers and named ones such as name=systemd).
func v1Hierarchies() ([]v1Hierarchy, error) {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return nil, err
	}
	mounts := map[string]*mountinfo.Info{} // sorted controller list → mount
	for _, m := range ms {
		var ctrls []string
		for _, o := range strings.Split(m.VFSOptions, ",") {
			switch o {
			case "rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods":
				continue
			}
			if strings.HasPrefix(o, "release_agent=") {
				continue
			}
			ctrls = append(ctrls, o)
		}
		slices.Sort(ctrls)
		if key := strings.Join(ctrls, ","); mounts[key] == nil {
			mounts[key] = m
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var out []v1Hierarchy
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[0] == "0" || parts[1] == "" {
			continue
		}
		m := mounts[strings.Join(slices.Sorted(strings.SplitSeq(parts[1], ",")), ",")]
		if m == nil {
			continue // a hierarchy that is not mounted here
		}
		rel := strings.TrimPrefix(parts[2], strings.TrimSuffix(m.Root, "/"))
		out = append(out, v1Hierarchy{dir: filepath.Join(m.Mountpoint, rel), cpuset: strings.Contains(","+parts[1]+",", ",cpuset,")})
	}
	return out, nil
}

// removeCgroupDirs removes a cgroup directory and its children, deepest
// first, waiting briefly for exiting processes to leave them.
func removeCgroupDirs(top string) error {
	if _, err := os.Stat(top); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; ; try++ {
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || try >= 100 {
				last = fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return last
}

// nspawnRunDir is where systemd-nspawn keeps runtime state without a host
// systemd (propagate/, locks/, unix-export/); nspawnRunMarker records that
// a BootSystemd created it (and which parents), so that the last container
// to go removes it.
const (
	nspawnRunDir    = "/run/systemd/nspawn"
	nspawnRunMarker = nspawnRunDir + "/.hostfork-test-created"
)

// lockRunShared takes a shared flock on /run for a container's lifetime and
// creates /run/systemd/nspawn, with a marker naming what it created, if it
// does not exist yet. Holding /run shared means "a container of ours is
// between boot and cleanup"; an exclusive lock proves none is.
func lockRunShared(t testing.TB) *os.File {
	f, err := os.Open("/run")
	if err != nil {
		return nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil
	}
	var created []string
	for _, d := range []string{"/run/systemd", nspawnRunDir} {
		if err := os.Mkdir(d, 0o755); err == nil {
			created = append(created, d)
		} else if !errors.Is(err, os.ErrExist) {
			t.Logf("nspawn: creating %s: %v", d, err)
		}
	}
	if len(created) > 0 {
		if err := os.WriteFile(nspawnRunMarker, []byte(strings.Join(created, "\n")+"\n"), 0o644); err != nil {
			t.Logf("nspawn: %v", err)
		}
	}
	return f
}

// removeNspawnRun removes what systemd-nspawn left for this machine under
// /run/systemd/nspawn; and, when no other container of ours is up (an
// exclusive lock on /run) and a BootSystemd created the directory, the
// directory itself and its emptied subdirectories.
func removeNspawnRun(t testing.TB, name string, lock *os.File) {
	subdirs := []string{"propagate", "locks", "unix-export"}
	for _, d := range subdirs {
		if err := os.RemoveAll(filepath.Join(nspawnRunDir, d, name)); err != nil {
			t.Errorf("nspawn %s cleanup: %v", name, err)
		}
	}
	if lock == nil {
		return
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return // another container is up; the last one removes them
	}
	b, err := os.ReadFile(nspawnRunMarker)
	if err != nil {
		return // not ours
	}
	for _, d := range subdirs {
		if err := unix.Rmdir(filepath.Join(nspawnRunDir, d)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
			t.Errorf("nspawn %s cleanup: %v", name, err)
		}
	}
	if err := os.Remove(nspawnRunMarker); err != nil {
		t.Errorf("nspawn %s cleanup: %v", name, err)
	}
	created := strings.Fields(string(b))
	for i := len(created) - 1; i >= 0; i-- {
		if err := unix.Rmdir(created[i]); errors.Is(err, unix.ENOTEMPTY) {
			t.Logf("nspawn %s cleanup: %s is in use by something else; left it", name, created[i])
		} else if err != nil && !errors.Is(err, unix.ENOENT) {
			t.Errorf("nspawn %s cleanup: removing %s: %v", name, created[i], err)
		}
	}
}

// ownerRecord is written into a container's directory so that a later
// BootSystemd can remove what a test process that died without its cleanup
// (killed by a timeout, say) left behind.
type ownerRecord struct {
	Owner   linux.Identity `json:"owner"`
	Name    string         `json:"name"`
	Cgroups []string       `json:"cgroups"` // cgroup2 first
}

// sweepStaleNspawn removes the leftovers of containers whose test process
// is gone: it kills what is left in their cgroups, removes the cgroups,
// unmounts their overlay, removes their /run/systemd/nspawn entries and
// their directory. Containers of live test processes are not touched.
func sweepStaleNspawn(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "hostfork-nspawn-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.json"))
		if err != nil {
			continue // being set up right now, or not ours
		}
		var rec ownerRecord
		if json.Unmarshal(b, &rec) != nil || rec.Name == "" || linux.Assess(rec.Owner) != linux.Gone {
			continue
		}
		if len(rec.Cgroups) > 0 {
			if g := cgroup.Open(rec.Cgroups[0]); g.Exists() {
				_ = g.Kill()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = g.WaitEmpty(ctx)
				cancel()
			}
		}
		var errs []error
		for _, g := range rec.Cgroups {
			if !strings.Contains(filepath.Base(g), "hostfork-nspawn-") {
				continue
			}
			errs = append(errs, removeCgroupDirs(g))
		}
		if err := unmountRetrying(filepath.Join(dir, "root")); err != nil {
			errs = append(errs, err)
		}
		for _, d := range []string{"propagate", "locks", "unix-export"} {
			_ = os.RemoveAll(filepath.Join(nspawnRunDir, d, rec.Name))
		}
		errs = append(errs, removeNspawnDir(dir))
		if err := errors.Join(errs...); err != nil {
			t.Logf("nspawn: leftovers of %s (its test process is gone): %v", rec.Name, err)
		} else {
			t.Logf("nspawn: removed the leftovers of %s (its test process died without cleanup)", rec.Name)
		}
	}
}

// removeNspawnDir removes a container's directory, but never while its
// overlay is still mounted: removing through it would walk the host's /.
func removeNspawnDir(dir string) error {
	var d, r unix.Stat_t
	if err := unix.Stat(dir, &d); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if err := unix.Stat(filepath.Join(dir, "root"), &r); err == nil && r.Dev != d.Dev {
		return fmt.Errorf("%s/root is still a mount point; left %s in place", dir, dir)
	}
	return os.RemoveAll(dir)
}

func unitExists(name string) bool {
	for _, d := range []string{"/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"} {
		if _, err := os.Lstat(filepath.Join(d, name)); err == nil {
			return true
		}
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}
