package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// buildHelper builds the standalone helper with scripts/build.sh into a
// directory every user can read, or skips without musl-gcc.
func buildHelper(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		testutil.Skip(t, "musl-gcc is not installed (Debian's musl-tools): the helper can't be built")
	}
	dir := t.TempDir()
	// The test's temporary directory too: a second user runs from here.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, supervise.HelperName)
	if out, err := exec.Command("bash", "../../scripts/build.sh", "--helper", p).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh --helper: %v\n%s", err, out)
	}
	return p
}

// helperProcs lists the live processes running the program at path, by
// PID, with their names (comm).
func helperProcs(t *testing.T, path string) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if x, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && x == path {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			m[pid] = strings.TrimSpace(string(comm))
		}
	}
	return m
}

// TestHelperProgram: with HOSTFORK_HELPER naming the standalone helper
// (decision 80), a command's guardian and an environment's keeper are
// that program, named as hostfork names them; results come through it
// unchanged; doctor says so; and a helper that can't be used is refused
// before anything is made, with the variable and the fix named.
func TestHelperProgram(t *testing.T) {
	c := newCLI(t)
	helper := buildHelper(t)
	withHelper := func(p string, args ...string) cliResult {
		t.Helper()
		cmd := c.command(args...)
		cmd.Env = append(cmd.Env, supervise.HelperEnv+"="+p)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := cliResult{stdout: out.String(), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// The guardian is the workload's parent.
	r := withHelper(helper, "run", "--", "sh", "-c", `cat /proc/$PPID/comm; readlink /proc/$PPID/exe; echo oops >&2; exit 7`)
	if r.code != 7 || r.stdout != "hostfork-guardi\n"+helper+"\n" || r.stderr != "oops\n" {
		t.Fatalf("run through the helper: %v", r)
	}
	r = withHelper(helper, "run", "--", "sh", "-c", `kill -TERM $$`)
	if r.code != 128+15 {
		t.Fatalf("a command killed by SIGTERM through the helper: %v", r)
	}
	// With --output inherit the guardian is handed hostfork's own
	// descriptors, which may be numbered above the helper's: the copy
	// executed must still be the helper's (spawn).
	r = withHelper(helper, "run", "--output", "inherit", "--", "sh", "-c", `cat /proc/$PPID/comm`)
	if r.code != 0 || r.stdout != "hostfork-guardi\n" {
		t.Fatalf("run --output inherit through the helper: %v", r)
	}

	// The keeper of a view.
	base := filepath.Join(t.TempDir(), "base")
	target := filepath.Join(t.TempDir(), "target")
	for _, d := range []string{base, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "f.txt"), []byte("lower\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := helperProcs(t, helper)
	r = withHelper(helper, "create", "--tree", "w=overlay:"+base, "--replace", target+"=w", "--ttl", "5m")
	if r.code != 0 {
		t.Fatalf("create: %v", r)
	}
	env := strings.TrimSpace(r.stdout)
	keepers := 0
	for pid, comm := range helperProcs(t, helper) {
		if _, old := before[pid]; !old && comm == "hostfork-keeper" {
			keepers++
		}
	}
	if keepers != 1 {
		t.Fatalf("%d new keepers run %s: %v", keepers, helper, helperProcs(t, helper))
	}
	r = withHelper(helper, "exec", env, "--", "cat", filepath.Join(target, "f.txt"))
	if r.code != 0 || r.stdout != "lower\n" {
		t.Fatalf("exec into the view: %v", r)
	}
	if r = withHelper(helper, "stop", env); r.code != 0 {
		t.Fatalf("stop: %v", r)
	}
	for pid, comm := range helperProcs(t, helper) {
		if _, old := before[pid]; !old {
			t.Errorf("process %d (%s) still runs the helper after stop", pid, comm)
		}
	}

	// doctor reports the helper in use.
	r = withHelper(helper, "doctor", "--json")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%v", err, r)
	}
	if h := rep.Facts.Helper; !h.Standalone || h.Path != helper || h.Err != "" {
		t.Fatalf("doctor's helper facts: %+v", h)
	}

	// Refused before anything is made: a relative path, and a copy that
	// other users could change.
	open := filepath.Join(filepath.Dir(helper), "open-helper")
	writeInBlocks(t, helper, open, 1<<20)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	runsBefore := len(c.ps(true))
	for _, tc := range []struct{ path, want string }{
		{"hostfork-helper", "absolute path"},
		{open, "lets other users change it"},
	} {
		r = withHelper(tc.path, "run", "--", "true")
		if r.code != 122 || !strings.Contains(r.stderr, supervise.HelperEnv) || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("run with %s=%s: %v; want exit 122 naming the variable and %q", supervise.HelperEnv, tc.path, r, tc.want)
		}
	}
	if n := len(c.ps(true)); n != runsBefore {
		t.Errorf("a refused helper left %d records", n-runsBefore)
	}
	fresh := filepath.Join(t.TempDir(), "fresh-store")
	if r = withHelper("hostfork-helper", "--root", fresh, "run", "--", "true"); r.code != 122 {
		t.Errorf("a refused helper with a new store: %v", r)
	}
	if _, err := os.Lstat(fresh); err == nil {
		t.Errorf("a refused helper left a new store at %s", fresh)
	}

	// A helper this user may not execute (root's, mode 0744: readable,
	// executable by root alone) is refused by name for a second user, not
	// left to fail at every start.
	u := testutil.NewUser(t, "hfhelp", testutil.UserOptions{})
	dir := filepath.Dir(helper)
	private := filepath.Join(dir, "private-helper")
	writeInBlocks(t, helper, private, 1<<20)
	if err := os.Chmod(private, 0o744); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostfork")
	if err := copyExecutable(c.exe, bin); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "user-store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(store, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--root", store, "run", "--", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", supervise.HelperEnv + "=" + private}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 122 || !strings.Contains(string(out), "this user may not execute it") {
		t.Errorf("a second user with %s=%s (root's, 0744): %v\n%s", supervise.HelperEnv, private, err, out)
	}
}
