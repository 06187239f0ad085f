package hostfork_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// forkEnv forks env and registers the children's stop and tree removal
// at cleanup, also when the test fails.
func forkEnv(t testing.TB, h *hostfork.Host, env *hostfork.Env, opts hostfork.ForkOptions) []*hostfork.Env {
	t.Helper()
	kids, err := env.Fork(ctxT(t), opts)
	for _, k := range kids {
		t.Cleanup(func() {
			if err := k.Stop(context.Background(), hostfork.StopOptions{Grace: -1}); err != nil {
				t.Errorf("cleanup: stopping %s: %v", k.ID(), err)
			}
			removeTrees(t, h, k.ID())
		})
	}
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(kids) != opts.Count {
		t.Fatalf("fork made %d environments, asked %d", len(kids), opts.Count)
	}
	return kids
}

// treeState reads every regular file below dir: relative path → content.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForkBtrfsWhileWriting forks an environment whose command keeps
// writing pairs of files (each generation's pair is written in a .tmp
// directory, then renamed into place): every child holds each pair whole
// or not at all, all children hold the same state (one instant), the fork
// is recorded with its freeze window, and the writer runs on after the
// thaw.
func TestForkBtrfsWhileWriting(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	h := newHost(t)
	ctx := ctxT(t)
	base := btrfsBaseline(t, mnt, map[string]string{"seed": "seed\n"})
	name := testutil.UniqueName("proj")
	if _, err := h.AddBaseline(ctx, name, base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.RemoveBaseline(context.Background(), name) })
	target := t.TempDir()
	s := spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindBtrfs, Baseline: name}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	}
	env := createEnv(t, h, s)
	// 4 KiB per file, so a torn write would show as a short file.
	writer := env.Command("sh", "-c", `i=0; blk=$(head -c 4096 /dev/zero | tr '\0' x)
while :; do i=$((i+1)); d=g$i
  mkdir $d.tmp; printf '%s %s' $i "$blk" > $d.tmp/a; printf '%s %s' $i "$blk" > $d.tmp/b; mv $d.tmp $d
  rm -rf g$((i-40))
done`)
	writer.Cwd = target
	if err := writer.Start(ctx); err != nil {
		t.Fatal(err)
	}
	host := env.Record().Trees[0].HostPath
	waitFile(t, filepath.Join(host, "g20", "b"))

	kids := forkEnv(t, h, env, hostfork.ForkOptions{Count: 3, Labels: map[string]string{"branch": "try"}})
	var first map[string]string
	for i, k := range kids {
		rec := k.Record()
		f := rec.Fork
		if f == nil || f.Parent != env.ID() || !f.Frozen || f.FrozenFor <= 0 || f.At == nil || len(f.Siblings) != 3 {
			t.Fatalf("child %d: fork record %+v", i, f)
		}
		if rec.Labels["branch"] != "try" || rec.State != hostfork.EnvActive || len(rec.Trees) != 1 || rec.Keeper == nil {
			t.Fatalf("child %d: record %+v", i, rec)
		}
		tr := rec.Trees[0]
		if !strings.Contains(tr.Note, "forked from "+env.ID()) || tr.HostPath == host {
			t.Fatalf("child %d tree: %+v", i, tr)
		}
		state := treeState(t, tr.HostPath)
		pairs := 0
		for p, a := range state {
			dir, file := filepath.Split(p)
			if strings.HasSuffix(filepath.Clean(dir), ".tmp") || file != "a" {
				continue
			}
			pairs++
			b, ok := state[dir+"b"]
			if !ok || a != b || len(a) < 4096 {
				t.Errorf("child %d: pair %s torn: a %d bytes, b %d bytes (present %v)", i, dir, len(a), len(b), ok)
			}
		}
		if pairs == 0 {
			t.Fatalf("child %d holds no pair: %v", i, keys(state))
		}
		if first == nil {
			first = state
		} else if !mapsEqual(first, state) {
			t.Errorf("child %d differs from child 0: not one instant (%v vs %v)", i, keys(state), keys(first))
		}
	}
	// Each child is its own: a write in one is seen in no other, nor in
	// the parent.
	kt := kids[0].Record().Trees[0].WorkloadPath
	mustRun(t, kids[0], kt, "sh", "-c", "echo mine > only-child0")
	wantAbsent(t, filepath.Join(kids[1].Record().Trees[0].HostPath, "only-child0"))
	wantAbsent(t, filepath.Join(host, "only-child0"))
	// The parent was thawed: its writer goes on.
	gen := newestGen(t, host)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if newestGen(t, host) > gen+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parent's writer did not go on after the fork (thawed?)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("freeze window %v", time.Duration(kids[0].Record().Fork.FrozenFor))
}

// newestGen is the highest generation number among g<N> in dir.
func newestGen(t *testing.T, dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var g int
		if _, err := fmt.Sscanf(e.Name(), "g%d", &g); err == nil && g > n {
			n = g
		}
	}
	return n
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not appear within 30s", p)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestForkOverlay forks an overlay environment whose upper holds a
// changed file, a new one, a deletion (a whiteout) and a directory made
// again (opaque): on XFS with reflink the upper is cloned, on ext4 it is
// copied, and the record says which; either way the child's view shows
// exactly the parent's.
func TestForkOverlay(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) string
		want string
	}{
		{"xfs-reflink", func(t *testing.T) string { return testutil.LoopXFS(t) }, "cloned (reflink)"},
		{"ext4-copy", func(t *testing.T) string { return ext4Dir(t) }, "copied (no reflink on this filesystem)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.fs(t)
			h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(dir, "store"), CgroupParent: testutil.CgroupParent(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			lower := filepath.Join(dir, "lower")
			writeFiles(t, lower, map[string]string{"f.txt": "lower\n", "gone.txt": "x\n", "d/old.txt": "old\n"})
			target := t.TempDir()
			s := spec.Environment{
				Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
				View:  spec.View{Replace: map[string]string{target: "proj"}},
			}
			env := createEnv(t, h, s)
			mustRun(t, env, target, "sh", "-c", "echo changed > f.txt; echo new > new.txt; rm gone.txt; rm -r d; mkdir d; echo fresh > d/new.txt")
			if err := env.Stop(ctxT(t), hostfork.StopOptions{}); err != nil {
				t.Fatal(err)
			}
			kids := forkEnv(t, h, env, hostfork.ForkOptions{Count: 2, TTL: time.Hour})
			for i, k := range kids {
				rec := k.Record()
				if rec.Fork == nil || rec.Fork.Frozen || rec.Fork.FrozenFor != 0 {
					t.Fatalf("child %d of a stopped parent: fork record %+v (want no freeze)", i, rec.Fork)
				}
				if rec.DeadlineAt == nil || rec.DeadlineAt.Sub(*rec.ActivatedAt) != time.Hour {
					t.Fatalf("child %d: deadline %v from %v, want --ttl 1h", i, rec.DeadlineAt, rec.ActivatedAt)
				}
				tr := rec.Trees[0]
				st := storageTree(tr)
				if !strings.Contains(tr.Note, tc.want) || st.Overlay == nil || st.Overlay.UpperCopy == nil || st.Overlay.UpperCopy.Files != 3 {
					t.Fatalf("child %d tree note %q (want %q), record %+v", i, tr.Note, tc.want, st.Overlay)
				}
				if tc.name == "xfs-reflink" && st.Overlay.UpperCopy.Reflink != storage.ReflinkAll {
					t.Fatalf("child %d: upper copy %+v, want every file cloned", i, st.Overlay.UpperCopy)
				}
				// Before anything runs in it, the child's tree is the
				// parent's at the fork instant: an export is complete.
				dest := filepath.Join(t.TempDir(), "out")
				res, err := k.Export(ctxT(t), "proj", dest, hostfork.ExportOptions{})
				if err != nil || res.Label != hostfork.ExportComplete || !strings.Contains(res.Note, "fork instant") {
					t.Fatalf("child %d export: %+v, %v", i, res, err)
				}
				wantFile(t, filepath.Join(dest, "f.txt"), "changed\n")
				wantAbsent(t, filepath.Join(dest, "gone.txt"))
				out := mustRun(t, k, target, "sh", "-c", "cat f.txt new.txt d/new.txt; ls -A d; test ! -e gone.txt && echo gone")
				if out != "changed\nnew\nfresh\nnew.txt\ngone\n" {
					t.Fatalf("child %d sees %q", i, out)
				}
				// Once a command ran, an export of the active child is live.
				res, err = k.Export(ctxT(t), "proj", dest+"2", hostfork.ExportOptions{})
				if err != nil || res.Label != hostfork.ExportLive {
					t.Fatalf("child %d export after a command: %+v, %v", i, res, err)
				}
			}
		})
	}
}

// TestForkBadInput: a count of 0 or 10000 is refused, naming the limit,
// and so is an active environment without a cgroup to freeze; nothing is
// made.
func TestForkBadInput(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	for _, n := range []int{0, 10000, -1} {
		kids, err := env.Fork(ctxT(t), hostfork.ForkOptions{Count: n})
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint(hostfork.MaxForkCount)) || len(kids) != 0 {
			t.Fatalf("fork --count %d: %v, %d children", n, err, len(kids))
		}
	}
	// An active environment without a cgroup (the subreaper tier) can't
	// be frozen: refused, saying to stop it first.
	sub := newEnv(t, h, spec.Environment{Tier: "subreaper"})
	if kids, err := sub.Fork(ctxT(t), hostfork.ForkOptions{Count: 1}); !errors.Is(err, hostfork.ErrUnsupported) || !strings.Contains(err.Error(), "stop it first") || len(kids) != 0 {
		t.Fatalf("fork of an active subreaper environment: %v, %d children", err, len(kids))
	}
	envs, err := h.Envs(ctxT(t), hostfork.EnvFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 2 {
		t.Fatalf("a refused fork made environments: %d in the store", len(envs))
	}
}

// TestForkWorktree: on a real git repository, a fork of an environment
// whose worktree has a commit of its own and uncommitted changes (a
// modified, a deleted and an untracked file) gives each child a branch
// hostfork/CHILD/TREE at the parent's branch's commit, with the parent's
// uncommitted changes as its own; children and parent are independent
// afterwards, and the repository's own work tree is untouched.
func TestForkWorktree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Skip(t, "needs git")
	}
	h := newHost(t)
	repo := t.TempDir()
	gitIn := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	writeFiles(t, repo, map[string]string{"f.txt": "base\n", "g.txt": "g\n", "keep.txt": "keep\n"})
	gitIn(repo, "init", "-q", "-b", "main")
	gitIn(repo, "add", ".")
	gitIn(repo, "commit", "-q", "-m", "first")
	target := t.TempDir()
	env := createEnv(t, h, spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindWorktree, Source: repo}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	})
	parentBranch := "hostfork/" + env.ID() + "/proj"
	mustRun(t, env, target, "sh", "-ec", `echo committed > keep.txt
git -c user.name=t -c user.email=t@t commit -q -am "parent's own commit"
echo changed > f.txt; rm g.txt; echo new > new.txt`)
	parentHead := gitIn(repo, "rev-parse", parentBranch)
	if parentHead == gitIn(repo, "rev-parse", "main") {
		t.Fatalf("the parent's commit did not land on its branch %s", parentBranch)
	}

	kids := forkEnv(t, h, env, hostfork.ForkOptions{Count: 2, TTL: time.Hour})
	for i, k := range kids {
		branch := "hostfork/" + k.ID() + "/proj"
		if got := gitIn(repo, "rev-parse", branch); got != parentHead {
			t.Fatalf("child %d: branch %s at %s, want the parent's branch's commit %s", i, branch, got, parentHead)
		}
		tr := k.Record().Trees[0]
		st := storageTree(tr)
		// The first child is taken from the parent, the others from the
		// first child's tree as taken at the fork instant (decision 112).
		from := parentBranch
		if i > 0 {
			from = "hostfork/" + kids[0].ID() + "/proj"
		}
		if st.Worktree == nil || st.Worktree.Branch != branch || st.Worktree.Ref != from || st.Worktree.FilesCopy == nil || !strings.Contains(tr.Note, "uncommitted changes included") {
			t.Fatalf("child %d tree record %+v, note %q", i, st.Worktree, tr.Note)
		}
		out := mustRun(t, k, target, "sh", "-c", `git rev-parse --abbrev-ref HEAD; cat f.txt keep.txt new.txt; test ! -e g.txt && echo no-g; git status --porcelain`)
		want := branch + "\nchanged\ncommitted\nnew\nno-g\n M f.txt\n D g.txt\n?? new.txt\n"
		if out != want {
			t.Fatalf("child %d sees:\n%s\nwant:\n%s", i, out, want)
		}
		mustRun(t, k, target, "sh", "-c", "echo child"+fmt.Sprint(i)+" > f.txt")
	}
	if out := mustRun(t, env, target, "cat", "f.txt"); out != "changed\n" {
		t.Fatalf("the parent after its children wrote: %q", out)
	}
	if out := mustRun(t, kids[0], target, "cat", "f.txt"); out != "child0\n" {
		t.Fatalf("child 0 after child 1 wrote: %q", out)
	}
	if s := gitIn(repo, "status", "--porcelain"); s != "" {
		t.Fatalf("the repository's own work tree changed: %q", s)
	}
}
