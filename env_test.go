package hostfork_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// A btrfs tree is a writable snapshot of a registered baseline subvolume:
// the workload writes to it at the replaced path, the baseline and the host
// directory it replaces are unchanged, and after stop the snapshot is still
// readable at its host path, even once the baseline is deleted.
func TestEnvBtrfsSnapshot(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	h := newHost(t)
	ctx := ctxT(t)
	base := btrfsBaseline(t, mnt, map[string]string{"f.txt": "baseline\n", "sub/g.txt": "g\n"})
	name := testutil.UniqueName("proj")
	b, err := h.AddBaseline(ctx, name, base)
	if err != nil {
		t.Fatal(err)
	}
	if b.Kind != hostfork.BaselineSubvolume || b.FSType != "btrfs" || !slices.Contains(b.Offers, spec.KindBtrfs) {
		t.Fatalf("baseline record: %+v", b)
	}
	target := t.TempDir()
	writeFiles(t, target, map[string]string{"host-only": "host\n"})

	s := spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindBtrfs, Baseline: name}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	}
	p, err := h.Plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unsupported) > 0 || len(p.Trees) != 1 || p.Trees[0].Kind != spec.KindBtrfs || p.Trees[0].Source != base ||
		p.Trees[0].Target != target || !strings.Contains(p.Trees[0].Consistency, "snapshot") {
		t.Fatalf("plan: unsupported %q, trees %+v", p.Unsupported, p.Trees)
	}
	env := createEnv(t, h, s)

	out := mustRun(t, env, target, "sh", "-c", "cat f.txt; test ! -e host-only && echo hidden; echo changed > f.txt; echo new > new.txt; rm sub/g.txt")
	if out != "baseline\nhidden\n" {
		t.Fatalf("first command printed %q", out)
	}
	// The tree persists from one command to the next.
	if out := mustRun(t, env, target, "sh", "-c", "cat f.txt new.txt; test ! -e sub/g.txt && echo removed"); out != "changed\nnew\nremoved\n" {
		t.Fatalf("second command printed %q", out)
	}
	// The baseline and the replaced host directory are untouched.
	wantFile(t, filepath.Join(base, "f.txt"), "baseline\n")
	wantFile(t, filepath.Join(base, "sub/g.txt"), "g\n")
	wantAbsent(t, filepath.Join(base, "new.txt"))
	wantFile(t, filepath.Join(target, "host-only"), "host\n")
	wantAbsent(t, filepath.Join(target, "f.txt"))

	rec := env.Record()
	if len(rec.Trees) != 1 {
		t.Fatalf("trees: %+v", rec.Trees)
	}
	tr := rec.Trees[0]
	st := storageTree(tr)
	if tr.Kind != spec.KindBtrfs || tr.Baseline != name || tr.WorkloadPath != target || st.Btrfs == nil ||
		!strings.HasPrefix(tr.HostPath, mnt+"/") || tr.HostPath != st.Path {
		t.Fatalf("tree record: %+v / %+v", tr, st)
	}
	baseSV, err := storage.InspectSubvolume(base)
	if err != nil {
		t.Fatal(err)
	}
	snapSV, err := storage.InspectSubvolume(tr.HostPath)
	if err != nil {
		t.Fatalf("the tree's host path is not a subvolume: %v", err)
	}
	if snapSV.ID == baseSV.ID || snapSV.ID != st.Btrfs.SubvolumeID || st.Btrfs.SourceID != baseSV.ID {
		t.Fatalf("snapshot %+v, baseline %+v, record %+v", snapSV, baseSV, st.Btrfs)
	}

	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	after, _, err := h.Status(ctx, env.ID())
	if err != nil {
		t.Fatal(err)
	}
	if after.State != hostfork.EnvStopped || len(after.Trees) != 1 || after.Trees[0].State != hostfork.TreeAllocated {
		t.Fatalf("after stop: state %s, trees %+v", after.State, after.Trees)
	}
	// Stop deletes no file; the snapshot does not need its baseline.
	if err := destroySubvolume(base); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, base)
	wantFile(t, filepath.Join(tr.HostPath, "f.txt"), "changed\n")
	wantFile(t, filepath.Join(tr.HostPath, "new.txt"), "new\n")
	wantAbsent(t, filepath.Join(tr.HostPath, "sub/g.txt"))
}

// An overlay tree over an ext4 directory: writes land in the upper only,
// the host's mount table never shows the overlay (only the keeper's does),
// the upper keeps the changes after stop, and export rebuilds the view
// from the recorded lower and upper once the keeper is gone.
func TestEnvOverlayExt4(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "lower\n", "d/keep.txt": "keep\n"})
	target := t.TempDir()
	s := spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	}
	env := createEnv(t, h, s)
	rec := env.Record()
	tr := rec.Trees[0]
	st := storageTree(tr)
	if tr.Kind != spec.KindOverlay || st.Overlay == nil || tr.HostPath != st.Overlay.Upper || !strings.HasPrefix(tr.HostPath, h.Root()+"/") {
		t.Fatalf("tree record: %+v / %+v", tr, st)
	}
	upper := tr.HostPath
	keeper := strconv.Itoa(rec.Keeper.PID)

	// The keeper's namespace holds the overlay at the target; the host's
	// table has no trace of it.
	// (The overlay's layers are named by the descriptors the keeper was
	// given, /proc/self/fd/N, never by path.)
	if m := mountsMentioning(mountinfo(t, keeper), " "+target+" "); len(m) != 1 || !strings.Contains(m[0], " - overlay ") || !strings.Contains(m[0], "upperdir=/proc/self/fd/") {
		t.Fatalf("the keeper's mount table should hold the overlay at %s: %q", target, m)
	}
	checkHostClean := func(when string) {
		t.Helper()
		host := mountinfo(t, "self")
		if m := mountsMentioning(host, upper); len(m) > 0 {
			t.Fatalf("%s: the host's mount table shows the overlay: %q", when, m)
		}
		if m := mountsMentioning(host, " "+target+" "); len(m) > 0 {
			t.Fatalf("%s: the host's mount table shows a mount at %s: %q", when, target, m)
		}
	}
	checkHostClean("while active")

	out := mustRun(t, env, target, "sh", "-c", "cat f.txt; echo changed > f.txt; echo new > new.txt; rm d/keep.txt; grep -c ' "+target+" .* - overlay ' /proc/self/mountinfo")
	if out != "lower\n1\n" {
		t.Fatalf("the workload printed %q", out)
	}
	checkHostClean("after a command")
	// The lower and the host's target are untouched; the upper has the
	// changes, with a whiteout for the deleted file.
	wantFile(t, filepath.Join(lower, "f.txt"), "lower\n")
	wantFile(t, filepath.Join(lower, "d/keep.txt"), "keep\n")
	wantAbsent(t, filepath.Join(lower, "new.txt"))
	wantAbsent(t, filepath.Join(target, "f.txt"))
	wantFile(t, filepath.Join(upper, "f.txt"), "changed\n")
	wantFile(t, filepath.Join(upper, "new.txt"), "new\n")
	var wo unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "d/keep.txt"), &wo); err != nil || wo.Mode&unix.S_IFMT != unix.S_IFCHR || wo.Rdev != 0 {
		t.Fatalf("no whiteout for the deleted file in the upper: %v mode %o", err, wo.Mode)
	}

	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if linux.Assess(linux.Identity{BootID: rec.Keeper.BootID, PID: rec.Keeper.PID, StartTime: rec.Keeper.StartTime}) != linux.Gone {
		t.Fatalf("the keeper %d survived the stop", rec.Keeper.PID)
	}
	checkHostClean("after stop")
	wantFile(t, filepath.Join(upper, "f.txt"), "changed\n")
	wantFile(t, filepath.Join(upper, "new.txt"), "new\n")

	// Export rebuilds the merged view from the recorded lower and upper
	// (the keeper is gone) and copies it out, labelled complete.
	dest := filepath.Join(t.TempDir(), "export")
	res, err := h.Export(ctx, env.ID(), "proj", dest, hostfork.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Label != hostfork.ExportComplete || res.Failed != 0 || res.Files != 2 {
		t.Fatalf("export: %+v", res)
	}
	wantFile(t, filepath.Join(dest, "f.txt"), "changed\n")
	wantFile(t, filepath.Join(dest, "new.txt"), "new\n")
	wantAbsent(t, filepath.Join(dest, "d/keep.txt"))
	if fi, err := os.Stat(filepath.Join(dest, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("export lost the directory d: %v", err)
	}
	if want := upper + " over " + lower; res.Source != want {
		t.Errorf("export source %q, want %q (not the keeper's /proc path)", res.Source, want)
	}
	checkHostClean("after the export")
	// Usage counts the bytes the exports copied, not their records'.
	if u, err := h.Usage(ctx); err != nil || u.ExportBytes != res.Bytes {
		t.Errorf("usage export_bytes %v (%v), want the export's %d bytes", u.ExportBytes, err, res.Bytes)
	}

	// The lower changed in place after the environment was made: the
	// merged tree is not what it saw, so the export is not "complete"
	// (issue 39, item 14).
	writeFiles(t, lower, map[string]string{"d/other.txt": "later\n"})
	dest2 := filepath.Join(t.TempDir(), "export")
	res, err = h.Export(ctx, env.ID(), "proj", dest2, hostfork.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Label != hostfork.ExportLive || !strings.Contains(res.Note, "lower changed in place") {
		t.Errorf("export after the lower changed: label %s, note %q; want live/inconsistent with a note", res.Label, res.Note)
	}
}

// A copy tree is reflinked where the filesystem allows it (a btrfs source,
// copied on the same filesystem) and copied byte by byte elsewhere (a
// tmpfs source copied into the ext4 store); the record's note says which.
func TestEnvCopyReflink(t *testing.T) {
	files := map[string]string{"f.txt": "source\n", "big.bin": strings.Repeat("0123456789abcdef", 8192), "d/e.txt": "e\n"}
	for _, tc := range []struct {
		name    string
		source  func(t *testing.T) string
		reflink storage.ReflinkResult
	}{
		{"btrfs", func(t *testing.T) string {
			dir := filepath.Join(testutil.LoopBtrfs(t, ""), "src")
			writeFiles(t, dir, files)
			return dir
		}, storage.ReflinkAll},
		{"tmpfs-to-ext4", func(t *testing.T) string {
			dir := tmpfsDir(t)
			writeFiles(t, dir, files)
			return dir
		}, storage.ReflinkNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.source(t)
			h := newHost(t)
			ctx := ctxT(t)
			target := t.TempDir()
			s := spec.Environment{
				Trees: map[string]spec.Tree{"proj": {Kind: spec.KindCopy, Source: src}},
				View:  spec.View{Replace: map[string]string{target: "proj"}},
			}
			p, err := h.Plan(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(p.Trees[0].Consistency, "reflink") {
				t.Fatalf("plan does not mention reflink: %+v", p.Trees[0])
			}
			env := createEnv(t, h, s)
			tr := env.Record().Trees[0]
			st := storageTree(tr)
			want := "copied 3 files, reflink " + string(tc.reflink)
			if tr.Note != want || st.Copy == nil || st.Copy.Reflink != tc.reflink || st.Copy.Files != 3 {
				t.Fatalf("note %q (want %q), copy record %+v", tr.Note, want, st.Copy)
			}
			if tc.reflink == storage.ReflinkAll && (st.Copy.Cloned != 3 || !strings.HasPrefix(tr.HostPath, filepath.Dir(src)+"/")) {
				t.Fatalf("a reflinked copy must be on the source's filesystem with every file cloned: %+v at %s", st.Copy, tr.HostPath)
			}
			if tc.reflink == storage.ReflinkNone && (st.Copy.Cloned != 0 || !strings.HasPrefix(tr.HostPath, h.Root()+"/")) {
				t.Fatalf("copy record %+v at %s", st.Copy, tr.HostPath)
			}
			out := mustRun(t, env, target, "sh", "-c", "cat f.txt d/e.txt; wc -c < big.bin; echo changed > f.txt")
			if out != "source\ne\n131072\n" {
				t.Fatalf("the workload printed %q", out)
			}
			wantFile(t, filepath.Join(src, "f.txt"), "source\n")
			wantFile(t, filepath.Join(tr.HostPath, "f.txt"), "changed\n")
			wantFile(t, filepath.Join(tr.HostPath, "big.bin"), files["big.bin"])
		})
	}
}

// Two environments over the same baseline, at the same time and at the
// same workload path, each see only their own writes.
func TestEnvTwoOverSameBaseline(t *testing.T) {
	files := map[string]string{"f.txt": "base\n"}
	for _, kind := range []string{spec.KindBtrfs, spec.KindOverlay} {
		t.Run(kind, func(t *testing.T) {
			var base string
			if kind == spec.KindBtrfs {
				base = btrfsBaseline(t, testutil.LoopBtrfs(t, ""), files)
			} else {
				base = ext4Dir(t)
				writeFiles(t, base, files)
			}
			h := newHost(t)
			ctx := ctxT(t)
			name := testutil.UniqueName("shared")
			if _, err := h.AddBaseline(ctx, name, base); err != nil {
				t.Fatal(err)
			}
			target := t.TempDir()
			s := spec.Environment{
				Trees: map[string]spec.Tree{"proj": {Kind: kind, Baseline: name}},
				View:  spec.View{Replace: map[string]string{target: "proj"}},
			}
			a := createEnv(t, h, s)
			b := createEnv(t, h, s)
			// A long-running command in a holds its view open while b writes.
			hold := a.Command("sleep", "300")
			if err := hold.Start(ctx); err != nil {
				t.Fatal(err)
			}
			mustRun(t, a, target, "sh", "-c", "echo from-a > f.txt; echo a > only-a")
			mustRun(t, b, target, "sh", "-c", "echo from-b > f.txt; echo b > only-b")
			if out := mustRun(t, a, target, "sh", "-c", "cat f.txt only-a; test ! -e only-b && echo no-b"); out != "from-a\na\nno-b\n" {
				t.Fatalf("a sees %q", out)
			}
			if out := mustRun(t, b, target, "sh", "-c", "cat f.txt only-b; test ! -e only-a && echo no-a"); out != "from-b\nb\nno-a\n" {
				t.Fatalf("b sees %q", out)
			}
			wantFile(t, filepath.Join(base, "f.txt"), "base\n")
			wantAbsent(t, filepath.Join(base, "only-a"))
			wantAbsent(t, filepath.Join(base, "only-b"))
			ta, tb := a.Record().Trees[0], b.Record().Trees[0]
			if ta.HostPath == tb.HostPath {
				t.Fatalf("both environments use %s", ta.HostPath)
			}
			wantFile(t, filepath.Join(ta.HostPath, "f.txt"), "from-a\n")
			wantFile(t, filepath.Join(tb.HostPath, "f.txt"), "from-b\n")
			// Stopping one leaves the other working.
			if err := a.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
				t.Fatal(err)
			}
			if r, _ := hold.WaitTree(ctx); r.TreeState != hostfork.PhaseExited {
				t.Fatalf("a's command survived a's stop: %+v", r)
			}
			if out := mustRun(t, b, target, "cat", "f.txt"); out != "from-b\n" {
				t.Fatalf("b after a's stop sees %q", out)
			}
		})
	}
}

// A daemon that double-forks and calls setsid inside an environment's view
// is in the view and in the environment's cgroup, and is stopped with the
// environment (checked by process identity, not by PID alone).
func TestEnvDaemonStoppedWithEnv(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "lower\n"})
	target := t.TempDir()
	env := createEnv(t, h, spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	})
	rec := env.Record()
	cmd := env.Command("sh", "-c", `( setsid sh -c 'echo $$ > daemon.pid.tmp; mv daemon.pid.tmp daemon.pid; exec sleep 300' & ); exit 0`)
	cmd.Cwd = target
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := cmd.Wait(ctx); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("leader: %v %+v", err, r)
	}
	// The pid file is written inside the view; the host reads it in the
	// overlay's upper.
	pidfile := filepath.Join(rec.Trees[0].HostPath, "daemon.pid")
	var pid int
	for end := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(pidfile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatal("the daemon never wrote its pid")
		}
		time.Sleep(5 * time.Millisecond)
	}
	id, err := linux.IdentityOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := linux.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID == os.Getpid() {
		t.Fatal("the daemon is a child of the test")
	}
	ns := func(pid int) string {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if ns(pid) != ns(rec.Keeper.PID) || ns(pid) == ns(os.Getpid()) {
		t.Fatalf("the daemon's mount namespace %s is not the view's %s", ns(pid), ns(rec.Keeper.PID))
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	// The workload and its descendants are in the command's group (or
	// below it); the guardian is elsewhere, in the environment's
	// guardians group.
	if g := "/" + env.ID() + "/commands/" + cmd.ID(); !strings.Contains(string(cg), g+"\n") && !strings.Contains(string(cg), g+"/") {
		t.Fatalf("the daemon is not in its command's cgroup: %s", cg)
	}
	if r := cmd.Record(); r.TreeState != hostfork.PhaseLive {
		t.Fatalf("tree should be live while the daemon runs: %s", r.TreeState)
	}

	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.TreeState != hostfork.PhaseExited {
		t.Fatalf("tree after stop: %+v", r)
	}
	if linux.Assess(id) != linux.Gone {
		t.Fatalf("the daemon %v survived the environment's stop", id)
	}
}

// A Unix socket in a directory under a scratch or replace rule is reachable
// from inside the view when that directory is shared, while the rest of the
// covered directory stays hidden.
func TestEnvUnixSocketShared(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"scratch", "replace", "scratch-socket-file"} {
		t.Run(rule, func(t *testing.T) {
			h := newHost(t)
			covered := t.TempDir()
			sockDir := filepath.Join(covered, "run")
			writeFiles(t, covered, map[string]string{"secret.txt": "host\n", "run/.keep": ""})
			sock := filepath.Join(sockDir, "s.sock")
			serveUnix(t, sock)
			shared := sockDir
			if rule == "scratch-socket-file" {
				shared = sock // the socket itself, not its directory
			}
			s := spec.Environment{View: spec.View{Share: []string{shared}}}
			if rule != "replace" {
				s.View.Scratch = []string{covered}
			} else {
				// The tree's lower has no "run" directory: the mount point
				// is made inside the private layer.
				lower := ext4Dir(t)
				writeFiles(t, lower, map[string]string{"tree.txt": "tree\n"})
				s.Trees = map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}}
				s.View.Replace = map[string]string{covered: "proj"}
			}
			p, err := h.Plan(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			restored := false
			for _, r := range p.View.Rules {
				restored = restored || (r.Kind == "share" && r.Target == shared && r.Restore)
			}
			if !restored {
				t.Fatalf("the plan does not restore %s: %+v", shared, p.View.Rules)
			}
			env := createEnv(t, h, s)
			if out := mustRun(t, env, "/", "sh", "-c", "test ! -e "+covered+"/secret.txt && echo hidden; test -S "+sock+" && echo socket"); out != "hidden\nsocket\n" {
				t.Fatalf("inside the view: %q", out)
			}
			envv := append(hostfork.InheritedEnv(), childVar+"=unix-client")
			r := runWith(t, env, "/", envv, exe, sock)
			if r.status != 0 || r.stdout != "pong:ping\n" {
				t.Fatalf("client inside the view: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
			}
		})
	}
}

// A nested rule applies on top of the one it lies in, and the plan says so.
func TestEnvNestedRules(t *testing.T) {
	h := newHost(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "tree\n", "cache/c.txt": "cached\n"})
	target := t.TempDir()
	writeFiles(t, target, map[string]string{"cache/.keep": ""})
	s := spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View: spec.View{
			Replace: map[string]string{target: "proj"},
			Scratch: []string{filepath.Join(target, "cache")},
		},
	}
	p, err := h.Plan(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.View.Overlaps) != 1 || !strings.Contains(p.View.Overlaps[0], "scratch "+target+"/cache applies on top of replace "+target) {
		t.Fatalf("overlaps: %q", p.View.Overlaps)
	}
	env := createEnv(t, h, s)
	if out := mustRun(t, env, target, "sh", "-c", "cat f.txt; ls -A cache | wc -l; echo x > cache/tmp"); out != "tree\n0\n" {
		t.Fatalf("inside the view: %q", out)
	}
	wantAbsent(t, filepath.Join(env.Record().Trees[0].HostPath, "cache/tmp"))
}

// Requests that can't be honoured fail with a clear error before anything
// is allocated.
func TestEnvBadRequests(t *testing.T) {
	ctx := context.Background()
	newBad := func(t *testing.T) (*hostfork.Host, string) {
		h := newHost(t)
		return h, h.Capabilities().CgroupParent
	}

	t.Run("unknown-field-names-its-line", func(t *testing.T) {
		_, err := spec.Parse([]byte("trees:\n  proj:\n    kind: overlay\n    colour: red\n"))
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "colour") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("relative-target", func(t *testing.T) {
		h, cg := newBad(t)
		src := t.TempDir()
		_, err := h.Plan(ctx, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: src}},
			View:  spec.View{Replace: map[string]string{"work/proj": "proj"}},
		})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), `"work/proj" must be an absolute path`) {
			t.Fatalf("got %v", err)
		}
		wantNothingAllocated(t, h, cg)
	})

	t.Run("duplicate-target", func(t *testing.T) {
		h, cg := newBad(t)
		dir := t.TempDir()
		_, err := h.Plan(ctx, spec.Environment{View: spec.View{Scratch: []string{dir}, ReadOnly: []string{dir + "/"}}})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), dir+" is both") {
			t.Fatalf("got %v", err)
		}
		wantNothingAllocated(t, h, cg)
	})

	t.Run("aliased-target", func(t *testing.T) {
		h, cg := newBad(t)
		dir := t.TempDir()
		alias := filepath.Join(t.TempDir(), "alias")
		if err := os.Symlink(dir, alias); err != nil {
			t.Fatal(err)
		}
		_, err := h.Plan(ctx, spec.Environment{View: spec.View{Scratch: []string{dir}, ReadOnly: []string{alias}}})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "name the same directory") {
			t.Fatalf("got %v", err)
		}
		wantNothingAllocated(t, h, cg)
	})

	t.Run("missing-target", func(t *testing.T) {
		h, cg := newBad(t)
		missing := filepath.Join(t.TempDir(), "missing")
		_, err := h.Plan(ctx, spec.Environment{View: spec.View{Scratch: []string{missing}}})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("got %v", err)
		}
		wantAbsent(t, missing)
		wantNothingAllocated(t, h, cg)
	})

	t.Run("missing-baseline", func(t *testing.T) {
		h, cg := newBad(t)
		_, err := h.Plan(ctx, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindBtrfs, Baseline: "no-such-baseline"}},
			View:  spec.View{Replace: map[string]string{t.TempDir(): "proj"}},
		})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), `no baseline named "no-such-baseline"`) || !strings.Contains(err.Error(), "hostfork baseline add") {
			t.Fatalf("got %v", err)
		}
		wantNothingAllocated(t, h, cg)
	})

	t.Run("self-shadowing", func(t *testing.T) {
		h, cg := newBad(t)
		over := filepath.Dir(h.Root())
		_, err := h.Plan(ctx, spec.Environment{View: spec.View{Scratch: []string{over}}})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "would hide "+h.Root()) || !strings.Contains(err.Error(), "--share "+h.Root()) {
			t.Fatalf("got %v", err)
		}
		wantNothingAllocated(t, h, cg)
		// Restoring the store makes the same view acceptable, and the
		// store is the live one inside it.
		env := createEnv(t, h, spec.Environment{View: spec.View{Scratch: []string{over}, Share: []string{h.Root()}}})
		if out := mustRun(t, env, "/", "sh", "-c", "test -d "+filepath.Join(h.Root(), "runs", env.ID())+" && echo store; ls -A "+over+" | wc -l"); out != "store\n1\n" {
			t.Fatalf("inside the view: %q", out)
		}
	})

	t.Run("btrfs-over-ext4", func(t *testing.T) {
		h, cg := newBad(t)
		src := ext4Dir(t)
		p, err := h.Plan(ctx, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindBtrfs, Source: src}},
			View:  spec.View{Replace: map[string]string{t.TempDir(): "proj"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Unsupported) != 1 || !strings.Contains(p.Unsupported[0], "kind btrfs needs a btrfs subvolume") || !strings.Contains(p.Unsupported[0], "on ext4") {
			t.Fatalf("unsupported: %q", p.Unsupported)
		}
		if p.Trees[0].Kind != spec.KindBtrfs {
			t.Fatalf("the plan changed the kind: %+v", p.Trees[0])
		}
		_, err = h.Create(ctx, p)
		if !errors.Is(err, hostfork.ErrUnsupported) || !strings.Contains(err.Error(), "btrfs subvolume") {
			t.Fatalf("create: %v", err)
		}
		wantNothingAllocated(t, h, cg)
	})

	t.Run("view-fails-in-the-keeper", func(t *testing.T) {
		// A replace target that is a file passes the plan but can't be
		// mounted over with a directory: creation fails after the tree,
		// cgroups and keeper were made, and undoes all of them.
		h, cg := newBad(t)
		src := ext4Dir(t)
		file := filepath.Join(t.TempDir(), "file")
		writeFiles(t, filepath.Dir(file), map[string]string{"file": "x"})
		p, err := h.Plan(ctx, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: src}},
			View:  spec.View{Replace: map[string]string{file: "proj"}},
		})
		if err != nil {
			// Refusing it in the plan is just as good.
			if !errors.Is(err, hostfork.ErrInvalid) {
				t.Fatal(err)
			}
			wantNothingAllocated(t, h, cg)
			return
		}
		_, err = h.Create(ctx, p)
		if err == nil || !strings.Contains(err.Error(), file) {
			t.Fatalf("create: %v", err)
		}
		t.Logf("create failed as it should: %v", err)
		wantNothingAllocated(t, h, cg)
		envs, _ := h.Envs(ctx, hostfork.EnvFilter{})
		if len(envs) != 1 || envs[0].Error == "" || envs[0].Keeper != nil && linux.Assess(linux.Identity{BootID: envs[0].Keeper.BootID, PID: envs[0].Keeper.PID, StartTime: envs[0].Keeper.StartTime}) == linux.Alive {
			t.Fatalf("records: %+v", envs)
		}
		wantFile(t, file, "x")
	})

	t.Run("exec-into-stopped", func(t *testing.T) {
		h, _ := newBad(t)
		lower := ext4Dir(t)
		env := createEnv(t, h, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
			View:  spec.View{Replace: map[string]string{t.TempDir(): "proj"}},
		})
		if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := env.Command("true").Start(ctx); !errors.Is(err, hostfork.ErrEnvNotActive) {
			t.Fatalf("start in a stopped environment (same handle): %v", err)
		}
		again, err := h.OpenEnv(ctx, env.ID())
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Command("true").Start(ctx); !errors.Is(err, hostfork.ErrEnvNotActive) {
			t.Fatalf("start in a stopped environment (new handle): %v", err)
		}
		cmds, err := h.Commands(ctx, hostfork.CommandFilter{Env: env.ID()})
		if err != nil || len(cmds) != 0 {
			t.Fatalf("commands recorded: %v %+v", err, cmds)
		}
	})
}
