package hostfork_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A program in its own module (testdata/extmod) that imports the library,
// sets no Options.Exe and dispatches nothing in main, creates an
// environment with an overlay tree and a view, runs several commands in it
// and stops it, on the real kernel (issue 9). Its main runs exactly once:
// the keeper and the guardians, re-executed from its binary, never reach
// it. It is built offline from the module cache the main module's
// dependencies filled (its go.sum holds a copy of their entries).
func TestExternalModule(t *testing.T) {
	testutil.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "extmod")
	build := exec.Command(goTool(t), "build", "-o", bin, ".")
	build.Dir = filepath.Join("testdata", "extmod")
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	before := moduleFiles(t, build.Dir)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/extmod: %v\n%s", err, out)
	}
	if after := moduleFiles(t, build.Dir); after != before {
		t.Errorf("go build changed testdata/extmod's go.mod or go.sum: run 'go mod tidy' there and commit them")
	}

	parent := testutil.CgroupParent(t)
	root := filepath.Join(t.TempDir(), "store")
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"base.txt": "base\n"})
	target := t.TempDir()
	writeFiles(t, target, map[string]string{"host-only.txt": "host\n"})
	mainlog := filepath.Join(t.TempDir(), "main.log")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "-root", root, "-lower", lower, "-target", target, "-mainlog", mainlog)
	run.Env = append(os.Environ(), "HOSTFORK_CGROUP_PARENT="+parent)
	run.Dir = t.TempDir() // a stray store made in the cwd would show here
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	// Whatever happened, stop and clean what it made.
	t.Cleanup(func() { cleanStore(t, root, parent) })
	if err != nil {
		t.Fatalf("extmod: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	t.Logf("extmod printed:\n%s", strings.Join(lines[:len(lines)-1], "\n"))
	want := []string{"read back: from-extmod", "captured: base.txt new.txt 1", "timed out: timeout"}
	if len(lines) != len(want)+1 {
		t.Fatalf("extmod printed %d lines, want %d", len(lines), len(want)+1)
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d: %q, want %q", i+1, lines[i], w)
		}
	}
	var sum struct {
		Env      string                   `json:"env"`
		State    hostfork.EnvState        `json:"state"`
		Commands []hostfork.CommandRecord `json:"commands"`
		Tree     hostfork.Tree            `json:"tree"`
	}
	js, ok := strings.CutPrefix(lines[len(lines)-1], "summary ")
	if !ok {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.State != hostfork.EnvStopped || len(sum.Commands) != 4 {
		t.Fatalf("summary: %+v", sum)
	}

	log, err := os.ReadFile(mainlog)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "main "); n != 1 {
		t.Errorf("the program's main ran %d times:\n%s", n, log)
	}
	if ents, _ := os.ReadDir(run.Dir); len(ents) > 0 {
		t.Errorf("the program left %v in its working directory", ents)
	}
	// The tree is the program's: its writes are in the upper, not on the
	// host.
	wantFile(t, filepath.Join(sum.Tree.HostPath, "new.txt"), "from-extmod\n")
	wantAbsent(t, filepath.Join(target, "new.txt"))
	wantAbsent(t, filepath.Join(lower, "new.txt"))

	// Another process (this test) reads the same records.
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	envs, err := h.Envs(ctx, hostfork.EnvFilter{Labels: hostfork.Selector{"from=extmod"}, WithCommands: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 1 || envs[0].ID != sum.Env || envs[0].State != hostfork.EnvStopped || len(envs[0].Commands) != 4 {
		t.Fatalf("the program's environment as this process reads it: %+v", envs)
	}
	e := envs[0]
	if e.Keeper == nil {
		t.Fatal("no keeper recorded for an environment with a view")
	}
	wantGone(t, "the keeper", linux.Identity{BootID: e.Keeper.BootID, PID: e.Keeper.PID, StartTime: e.Keeper.StartTime})
	for _, c := range e.Commands {
		if c.State != hostfork.CommandExited || c.TreeState != hostfork.PhaseExited || c.Liveness != hostfork.Exited {
			t.Errorf("command %s %q: %s, tree %s, liveness %s", c.ID, c.Argv, c.State, c.TreeState, c.Liveness)
		}
	}
	if last := e.Commands[3]; last.StopReason != hostfork.ReasonTimeout || !last.StopReason.EndedByHostfork() {
		t.Errorf("the timed-out command: reason %q", last.StopReason)
	}
}

// moduleFiles is the content of a module's go.mod and go.sum.
func moduleFiles(t *testing.T, dir string) string {
	t.Helper()
	var s string
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		s += string(b)
	}
	return s
}

// cleanStore stops whatever is still active in the store at root and
// removes the allocated trees (for stores a child process made).
func cleanStore(t *testing.T, root, parent string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "registry.sqlite")); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer h.Close()
	envs, err := h.Envs(ctx, hostfork.EnvFilter{})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, e := range envs {
		if !e.State.Final() {
			if _, err := h.StopEnv(ctx, e.ID, hostfork.StopOptions{Grace: -1}); err != nil {
				t.Errorf("cleanup: stopping %s: %v", e.ID, err)
			}
		}
		removeTrees(t, h, e.ID)
	}
}
