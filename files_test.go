package hostfork_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// viewEnv creates an environment whose overlay tree replaces a host
// directory that holds a file the view hides ("host-only"); it returns the
// environment and the replaced path.
func viewEnv(t *testing.T, h *hostfork.Host) (*hostfork.Env, string) {
	t.Helper()
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "tree\n", "sub/g.txt": "g\n"})
	target := t.TempDir()
	writeFiles(t, target, map[string]string{"host-only": "HOST SECRET\n"})
	env := createEnv(t, h, spec.Environment{
		Trees:    map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:     spec.View{Replace: map[string]string{target: "proj"}},
		Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(10 * time.Minute)},
	})
	return env, target
}

func sum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Hostile symbolic links made inside an environment (absolute, ".."
// chains, /proc magic links, one to /etc/shadow) never reach what the view
// hides, and a write through one replaces the link, never its target.
func TestFilesHostileSymlinks(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env, target := viewEnv(t, h)
	dots := strings.Repeat("../", 20) + strings.TrimPrefix(target, "/") + "/host-only"
	mustRun(t, env, target, "sh", "-c", `ln -s "$1/host-only" abs && ln -s "$2" dots && ln -s /etc/shadow shadow && ln -s /proc/1/root/etc/hostname magic && ln -s "$1" loop-to-self`, "sh", target, dots)

	for _, name := range []string{"abs", "dots", "loop-to-self/host-only"} {
		f, err := env.ReadFile(ctx, filepath.Join(target, name))
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Fatalf("read %s through the view: %q (the view hides the host's file)", name, b)
		}
		if !errors.Is(err, hostfork.ErrNotFound) {
			t.Errorf("read %s: %v, want ErrNotFound (the view has no such file)", name, err)
		}
	}
	if f, err := env.ReadFile(ctx, filepath.Join(target, "magic")); err == nil {
		f.Close()
		t.Errorf("a /proc magic link was followed")
	}
	// The view's own file is read, through a link or not.
	f, err := env.ReadFile(ctx, "/../../"+target+"/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(f); string(b) != "tree\n" {
		t.Errorf("f.txt read %q", b)
	}
	f.Close()

	// Writes through the links replace them; their targets are untouched.
	shadow := sum(t, "/etc/shadow")
	for _, name := range []string{"shadow", "abs", "dots"} {
		if _, err := env.WriteFile(ctx, filepath.Join(target, name), strings.NewReader("mine\n"), 0o600); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	if sum(t, "/etc/shadow") != shadow {
		t.Fatal("/etc/shadow changed")
	}
	if b, _ := os.ReadFile(filepath.Join(target, "host-only")); string(b) != "HOST SECRET\n" {
		t.Fatalf("the host's hidden file changed: %q", b)
	}
	if out := mustRun(t, env, target, "sh", "-c", "test ! -L shadow && cat shadow abs dots && stat -c %u shadow"); out != "mine\nmine\nmine\n"+strconv.Itoa(os.Getuid())+"\n" {
		t.Errorf("in the view: %q", out)
	}
	// ".." above the root stays at the root; a directory link out of the
	// tree leads into the view, not the host's hidden directory.
	mustRun(t, env, target, "ln", "-s", target, "up")
	if _, err := env.WriteFile(ctx, filepath.Join(target, "up", "via-link"), strings.NewReader("v\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "via-link")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a write through a directory link reached the host's hidden directory: %v", err)
	}
	if mustRun(t, env, target, "cat", "via-link") != "v\n" {
		t.Error("the write through a directory link is not in the view")
	}
}

// A write whose directory is missing fails with ErrNotFound naming the
// directory and the fix, and makes nothing; an existing directory is
// refused as a file.
func TestFilesBadInput(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env, target := viewEnv(t, h)
	_, err := env.WriteFile(ctx, filepath.Join(target, "no/such/dir/f"), strings.NewReader("x"), 0)
	if !errors.Is(err, hostfork.ErrNotFound) || !strings.Contains(err.Error(), filepath.Join(target, "no/such/dir")) || !strings.Contains(err.Error(), "mkdir -p") {
		t.Errorf("write below a missing directory: %v", err)
	}
	if out := mustRun(t, env, target, "ls", "-A"); out != "f.txt\nsub\n" {
		t.Errorf("something was made: %q", out)
	}
	if _, err := env.WriteFile(ctx, filepath.Join(target, "sub"), strings.NewReader("x"), 0); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("write over a directory: %v", err)
	}
	if err := env.Mkdir(ctx, filepath.Join(target, "sub"), 0o755); !errors.Is(err, hostfork.ErrExists) {
		t.Errorf("mkdir of an existing directory: %v", err)
	}
	if _, err := env.ReadDir(ctx, filepath.Join(target, "missing"), 1); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("listing a missing directory: %v", err)
	}
}

// ReadDir lists what the view holds, links as links; Stat and Mkdir work
// in the view; Watch reports changes made by a command inside it.
func TestFilesListAndWatch(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env, target := viewEnv(t, h)
	mustRun(t, env, target, "ln", "-s", "/etc/shadow", "link")
	es, err := env.ReadDir(ctx, target, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Path+":"+e.Type+":"+e.Target)
	}
	if strings.Join(got, " ") != "f.txt:file: link:symlink:/etc/shadow sub:dir: sub/g.txt:file:" {
		t.Errorf("listing: %q", got)
	}
	if err := env.Mkdir(ctx, filepath.Join(target, "made"), 0o750); err != nil {
		t.Fatal(err)
	}
	if st, err := env.Stat(ctx, filepath.Join(target, "made")); err != nil || st.Type != "dir" || st.Mode != "drwxr-x---" {
		t.Errorf("stat of the made directory: %+v %v", st, err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan hostfork.FileEvent, 100)
	go func() {
		defer close(events)
		for ev, err := range env.Watch(wctx, target, true) {
			if err != nil {
				t.Errorf("watch: %v", err)
				return
			}
			select {
			case events <- ev:
			default: // the test stopped reading
			}
		}
	}()
	wait := func(want func(hostfork.FileEvent) bool, what string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the watch ended before %s", what)
				}
				if want(ev) {
					return
				}
			case <-timeout:
				t.Fatalf("no %s within 30 s", what)
			}
		}
	}
	wait(func(ev hostfork.FileEvent) bool { return ev.Op == "ready" && ev.Path == target }, "ready event")
	if _, err := env.WriteFile(ctx, filepath.Join(target, "made", "probe"), strings.NewReader("p"), 0); err != nil {
		t.Fatal(err)
	}
	wait(func(ev hostfork.FileEvent) bool {
		return ev.Path == filepath.Join(target, "made", "probe") && ev.Op == "create"
	}, "event of the probe")
	mustRun(t, env, target, "sh", "-c", "mkdir -p deep/er && echo hi > deep/er/new.txt")
	wait(func(ev hostfork.FileEvent) bool {
		return ev.Path == filepath.Join(target, "deep/er/new.txt") && (ev.Op == "write" || ev.Op == "create")
	}, "event of deep/er/new.txt")
}

// Without a view, paths are the host's.
func TestFilesNoView(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	dir := t.TempDir()
	if _, err := env.WriteFile(ctx, filepath.Join(dir, "a"), bytes.NewReader([]byte("host\n")), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "host\n" {
		t.Fatalf("%q %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "a")); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode())
	}
}

// BenchmarkCopy1GiB copies a 1 GiB file into and out of an environment's
// view (Env.WriteFile, Env.ReadFile: what hostfork cp does) side by side
// with plain cp(1), interleaved, between directories of one filesystem:
// tmpfs (/dev/shm) for the store, the tree and both sides, so that the
// disk's writeback (shared with whatever else runs) is not measured.
// Target: hostfork at least 80 % of cp's speed (medians). Run with
// -benchtime 9x.
func BenchmarkCopy1GiB(b *testing.B) {
	dir, err := os.MkdirTemp("/dev/shm", "hostfork-bench-")
	if err != nil {
		b.Skip("no /dev/shm: ", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	tmp := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			b.Fatal(err)
		}
		return p
	}
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(dir, "store"), CgroupParent: testutil.CgroupParent(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	ctx := context.Background()
	src := filepath.Join(tmp("src"), "big")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for i := 0; i < 1024; i++ {
		chunk[0] = byte(i)
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	target := tmp("target")
	p, err := h.Plan(ctx, spec.Environment{
		Trees:    map[string]spec.Tree{"proj": {Kind: spec.KindCopy, Source: tmp("empty")}},
		View:     spec.View{Replace: map[string]string{target: "proj"}},
		Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(time.Hour)},
	})
	if err != nil {
		b.Fatal(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1})
		removeTrees(b, h, env.ID())
	})
	plain, out := tmp("plain"), tmp("out")
	// Each round copies in and out both ways, interleaved, each copy
	// timed from a synced page cache, so that neither side pays the
	// other's writeback.
	// Medians: on tmpfs one copy now and then pays for fresh pages
	// (several times the others), which a sum would let decide.
	var cpIn, hfInD, cpOut, hfOut []time.Duration
	timed := func(d *[]time.Duration, f func() error) {
		syscall.Sync()
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*d = append(*d, time.Since(t0))
	}
	cp := func(from, to string) func() error {
		return func() error {
			if o, err := exec.Command("cp", from, to).CombinedOutput(); err != nil {
				return fmt.Errorf("cp: %v %s", err, o)
			}
			return nil
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Both sides write a new file: WriteFile writes beside the old
		// file and renames over it, and on tmpfs filling fresh pages
		// while the old ones are still held costs 3x overwriting pages
		// just freed (cp's O_TRUNC), which is not the copy's speed.
		for _, p := range []string{filepath.Join(plain, "big"), filepath.Join(out, "big"), filepath.Join(out, "big2")} {
			_ = os.Remove(p)
		}
		if i > 0 {
			if err := env.Remove(ctx, filepath.Join(target, "big")); err != nil {
				b.Fatal(err)
			}
		}
		hfIn := func() error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = env.WriteFile(ctx, filepath.Join(target, "big"), f, 0)
			return err
		}
		hfOutF := func() error {
			r, err := env.ReadFile(ctx, filepath.Join(target, "big"))
			if err != nil {
				return err
			}
			defer r.Close()
			w, err := os.Create(filepath.Join(out, "big2"))
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, r); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}
		// Who goes first alternates by round: the page cache and the
		// allocator favour the second of a pair.
		if i%2 == 0 {
			timed(&cpIn, cp(src, filepath.Join(plain, "big")))
			timed(&hfInD, hfIn)
			timed(&cpOut, cp(filepath.Join(plain, "big"), filepath.Join(out, "big")))
			timed(&hfOut, hfOutF)
		} else {
			timed(&hfInD, hfIn)
			timed(&cpIn, cp(src, filepath.Join(plain, "big")))
			timed(&hfOut, hfOutF)
			timed(&cpOut, cp(filepath.Join(plain, "big"), filepath.Join(out, "big")))
		}
	}
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return ds[len(ds)/2].Seconds()
	}
	mbps := func(ds []time.Duration) float64 { return 1024 / med(ds) }
	b.ReportMetric(mbps(cpIn), "cp-in-MiB/s")
	b.ReportMetric(mbps(hfInD), "hostfork-in-MiB/s")
	b.ReportMetric(mbps(cpOut), "cp-out-MiB/s")
	b.ReportMetric(mbps(hfOut), "hostfork-out-MiB/s")
	b.ReportMetric(med(cpIn)/med(hfInD), "in-ratio")
	b.ReportMetric(med(cpOut)/med(hfOut), "out-ratio")
}

// Rename and Remove act in the view: a link the workload made to the
// host's hidden directory is removed or moved as a link, a directory with
// such a link inside is removed without following it, and the host's
// files stay.
func TestFilesRenameRemove(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env, target := viewEnv(t, h)
	mustRun(t, env, target, "sh", "-c", `ln -s "$1" out && mkdir -p d/e && ln -s "$1" d/e/out && ln -s /etc d/etc && echo x > d/e/x`, "sh", target)
	if err := env.Rename(ctx, filepath.Join(target, "f.txt"), filepath.Join(target, "sub", "moved.txt")); err != nil {
		t.Fatal(err)
	}
	if err := env.Rename(ctx, filepath.Join(target, "out"), filepath.Join(target, "sub", "out")); err != nil {
		t.Fatal(err)
	}
	if err := env.Remove(ctx, filepath.Join(target, "d")); err != nil {
		t.Fatal(err)
	}
	if err := env.Remove(ctx, filepath.Join(target, "sub", "out")); err != nil {
		t.Fatal(err)
	}
	if err := env.Remove(ctx, filepath.Join(target, "d")); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("removing it again: %v, want ErrNotFound", err)
	}
	if err := env.Rename(ctx, filepath.Join(target, "nothing"), filepath.Join(target, "x")); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("renaming a missing file: %v, want ErrNotFound", err)
	}
	if out := mustRun(t, env, target, "sh", "-c", "ls -A; cat sub/moved.txt; ls sub"); out != "sub\ntree\ng.txt\nmoved.txt\n" {
		t.Errorf("in the view: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(target, "host-only")); err != nil || string(b) != "HOST SECRET\n" {
		t.Fatalf("the host's hidden file: %q %v", b, err)
	}
	if _, err := os.Stat("/etc/hostname"); err != nil {
		t.Fatalf("/etc: %v", err)
	}
}
