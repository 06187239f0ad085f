package hostfork_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// createEnv plans and creates s, failing the test on any error. At
// cleanup, also when the test fails, it stops the environment and removes
// its trees through their storage backends.
func createEnv(t *testing.T, h *hostfork.Host, s spec.Environment) *hostfork.Env {
	t.Helper()
	ctx := context.Background()
	p, err := h.Plan(ctx, s)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if len(p.Unsupported) > 0 {
		t.Fatalf("plan: unsupported here: %q", p.Unsupported)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}); err != nil {
			t.Errorf("cleanup: stopping %s: %v", env.ID(), err)
		}
		removeTrees(t, h, env.ID())
	})
	return env
}

// removeTrees deletes the allocated trees of environment id with their
// storage backends (identity-checked; a borrowed baseline is never
// touched).
func removeTrees(t testing.TB, h *hostfork.Host, id string) {
	t.Helper()
	st, _, err := h.Status(context.Background(), id)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, tr := range st.Trees {
		if tr.State != hostfork.TreeAllocated {
			continue
		}
		if err := removeTree(tr); err != nil {
			t.Errorf("cleanup: removing tree %s of %s: %v", tr.Name, id, err)
		}
	}
}

func removeTree(tr hostfork.Tree) error {
	st := storageTree(tr)
	b, err := storage.ForKind(st.Kind)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A view's mount namespace is released when its last process is gone;
	// that can trail the processes' exit by a moment.
	remove := b.Remove
	if st.Kind == storage.KindWorktree {
		// A test's worktree holds what it wrote: removed forced, with its
		// branch.
		remove = func(ctx context.Context, st storage.Tree) error {
			return storage.Worktree{}.RemoveWorktree(ctx, st, true, true)
		}
	}
	for i := 0; ; i++ {
		err = remove(ctx, st)
		if err == nil || i == 50 || !(errors.Is(err, storage.ErrBusy) || errors.Is(err, unix.EBUSY)) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func storageTree(tr hostfork.Tree) storage.Tree {
	var st storage.Tree
	if err := json.Unmarshal(tr.Storage, &st); err != nil {
		panic(fmt.Sprintf("tree %s: unreadable storage record: %v", tr.Name, err))
	}
	return st
}

// result is what a finished command left behind.
type result struct {
	status         int
	stdout, stderr string
	rec            hostfork.CommandRecord
}

// run runs argv in env with cwd (inside the view) and waits until its
// whole tree is gone.
func run(t *testing.T, env *hostfork.Env, cwd string, argv ...string) result {
	t.Helper()
	return runWith(t, env, cwd, nil, argv...)
}

func runWith(t *testing.T, env *hostfork.Env, cwd string, envv []string, argv ...string) result {
	t.Helper()
	ctx := ctxT(t)
	cmd := env.Command(argv...)
	cmd.Cwd = cwd
	cmd.Env = envv
	if err := cmd.Start(ctx); err != nil {
		t.Fatalf("starting %q: %v", argv, err)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatalf("waiting for %q: %v", argv, err)
	}
	status, ok := hostfork.ExitStatus(rec)
	if !ok {
		glog, _ := os.ReadFile(filepath.Join(rec.Dir, "guardian.log"))
		t.Fatalf("%q: no exit status: %+v; guardian log: %q", argv, rec, glog)
	}
	out, _ := os.ReadFile(rec.StdoutPath)
	errb, _ := os.ReadFile(rec.StderrPath)
	return result{status: status, stdout: string(out), stderr: string(errb), rec: rec}
}

// mustRun is run that requires status 0.
func mustRun(t *testing.T, env *hostfork.Env, cwd string, argv ...string) string {
	t.Helper()
	r := run(t, env, cwd, argv...)
	if r.status != 0 {
		t.Fatalf("%q in %s exited %d; stdout %q stderr %q", argv, cwd, r.status, r.stdout, r.stderr)
	}
	return r.stdout
}

// writeFiles creates files (relative path → content) below dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wantFile checks a file's content on the host.
func wantFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("on the host: %v", err)
	}
	if string(b) != want {
		t.Fatalf("on the host, %s holds %q, want %q", path, b, want)
	}
}

func wantAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("on the host, %s exists (or can't be checked: %v), want it absent", path, err)
	}
}

// fsDir returns a new directory on the filesystem at base, which must be
// of type magic (else the test skips), removed at cleanup.
func fsDir(t testing.TB, base string, magic int64, what string) string {
	t.Helper()
	var sf unix.Statfs_t
	if err := unix.Statfs(base, &sf); err != nil || int64(sf.Type) != magic {
		testutil.Skip(t, base+" is not "+what)
	}
	dir, err := os.MkdirTemp(base, "hostfork-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// ext4Dir is a new directory from t.TempDir, which must be on ext4.
func ext4Dir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	var sf unix.Statfs_t
	if err := unix.Statfs(d, &sf); err != nil || sf.Type != unix.EXT4_SUPER_MAGIC {
		testutil.Skip(t, "the temporary directory is not on ext4")
	}
	return d
}

func tmpfsDir(t testing.TB) string {
	t.Helper()
	return fsDir(t, "/dev/shm", unix.TMPFS_MAGIC, "tmpfs")
}

// btrfsBaseline makes a subvolume with files on the loop filesystem mnt.
func btrfsBaseline(t testing.TB, mnt string, files map[string]string) string {
	t.Helper()
	p := filepath.Join(mnt, testutil.UniqueName("base"))
	if err := storage.CreateSubvolume(p); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, p, files)
	return p
}

// destroySubvolume deletes the subvolume at path with
// BTRFS_IOC_SNAP_DESTROY, as an operator deleting a baseline would.
func destroySubvolume(path string) error {
	const iocSnapDestroy = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	var args struct {
		fd   int64
		name [4088]byte
	}
	name := filepath.Base(path)
	copy(args.name[:], name)
	fd, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(fd)
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocSnapDestroy, uintptr(unsafe.Pointer(&args)))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return &os.PathError{Op: "ioctl BTRFS_IOC_SNAP_DESTROY", Path: path, Err: errno}
		}
		return nil
	}
}

// mountinfo returns the mount table of pid ("self" for this process).
func mountinfo(t testing.TB, pid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mountsMentioning returns the lines of a mount table that contain s.
func mountsMentioning(table, s string) []string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// openRegistry opens the store's registry for what the public API does
// not show (the allocation ledger).
func openRegistry(t testing.TB, h *hostfork.Host) *registry.DB {
	t.Helper()
	db, err := registry.Open(context.Background(), h.Root())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// wantNothingAllocated checks that a refused request left nothing behind:
// no environment record other than failed ones whose intents are all
// settled with their targets gone (but for the run directory, kept as
// evidence and recorded as such), no tree, no cgroup under the test's
// parent, no mount of the store in this namespace.
func wantNothingAllocated(t *testing.T, h *hostfork.Host, cgroupParent string) {
	t.Helper()
	ctx := context.Background()
	envs, err := h.Envs(ctx, hostfork.EnvFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var db *registry.DB
	for _, e := range envs {
		if e.State != hostfork.EnvFailed {
			t.Errorf("environment %s is %s after a refused request", e.ID, e.State)
			continue
		}
		if db == nil {
			db = openRegistry(t, h)
		}
		ins, err := db.Intents(ctx, registry.IntentFilter{EnvID: e.ID})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			_, err := os.Lstat(in.Target)
			exists := err == nil
			if exists && in.Kind == registry.KindDir && in.Target == e.RunDir {
				// The run directory is kept as the failure's evidence
				// (keeper.log); the ledger must say it exists and which
				// directory it is, for retention to remove exactly it.
				if in.State != registry.IntentCreated || in.Identity == "" {
					t.Errorf("failed environment %s: its kept run directory %s has intent %d in state %s with identity %q, want it settled as created with its identity", e.ID, in.Target, in.ID, in.State, in.Identity)
				}
				continue
			}
			switch in.State {
			case registry.IntentReleased, registry.IntentAbandoned:
			default:
				t.Errorf("failed environment %s: intent %d (%s %s) is %s, want it settled", e.ID, in.ID, in.Kind, in.Target, in.State)
			}
			if exists {
				t.Errorf("failed environment %s: %s %s still exists", e.ID, in.Kind, in.Target)
			}
		}
		for _, tr := range e.Trees {
			if tr.State != hostfork.TreeRemoved {
				t.Errorf("failed environment %s: tree %s is %s", e.ID, tr.Name, tr.State)
			}
		}
	}
	if ents, err := os.ReadDir(filepath.Join(h.Root(), "trees")); err == nil && len(ents) > 0 {
		t.Errorf("trees left in the store: %v", ents)
	}
	if cgroupParent != "" {
		ents, err := os.ReadDir(cgroupParent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("cgroup %s left under the test's parent", e.Name())
			}
		}
	}
	if m := mountsMentioning(mountinfo(t, "self"), h.Root()); len(m) > 0 {
		t.Errorf("mounts of the store in the host's table: %q", m)
	}
}

// waitWorkload waits until cmd's record names its workload (the guardian
// reported it), failing tb after a generous bound instead of hanging until
// the suite's timeout when it never starts.
func waitWorkload(tb testing.TB, cmd *hostfork.Command) {
	tb.Helper()
	for end := time.Now().Add(30 * time.Second); cmd.Record().Workload == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			tb.Fatalf("command %s: its workload was not reported within 30s: %+v", cmd.ID(), cmd.Record())
		}
	}
}
