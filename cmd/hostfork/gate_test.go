package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A stop revokes launch gates still waiting: a command registered but not
// yet released when its environment's stop begins is never released, its
// launcher fails with the reason, and nothing of it runs.
func TestStopRevokesWaitingGates(t *testing.T) {
	parent, run, env := gateEnv(t)
	// The exec pauses with its guardian started at the gate, not yet
	// registered; meanwhile the environment is stopped.
	ex := run([]string{"HOSTFORK_FAULT=guardian-started~1500ms"}, "exec", env, "--", "sleep", "300")
	var exOut strings.Builder
	ex.Stdout, ex.Stderr = &exOut, &exOut
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Process.Kill(); ex.Wait() })
	time.Sleep(500 * time.Millisecond)
	if out, err := run(nil, "stop", env).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	err := ex.Wait()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 122 || !strings.Contains(exOut.String(), "launch gate is revoked") {
		t.Fatalf("exec at a revoked gate: exit %d (%v): %s", code, err, exOut.String())
	}
	// Nothing of it runs: the environment's cgroups are gone or empty.
	g := cgroup.Open(filepath.Join(parent, env))
	if pids, _ := g.AllProcs(); len(pids) > 0 {
		t.Fatalf("processes left in the stopped environment: %v", pids)
	}
	ps, err := run(nil, "ps", "--json").CombinedOutput()
	if err != nil || strings.TrimSpace(string(ps)) != "[]" {
		t.Fatalf("ps after the revoked launch: %v: %s", err, ps)
	}
}

// A stop that lands after a command's registration and before its release
// (the launcher paused between them) never starts it: the guardian finds
// the stop request pending when the release comes. The record says the
// command was stopped by hostfork before it started, with no exit code,
// and the launcher exits 124 with one line saying so.
func TestStopAtTheGateStartsNothing(t *testing.T) {
	_, run, env := gateEnv(t)
	mark := filepath.Join(t.TempDir(), "ran")
	ex := run([]string{"HOSTFORK_FAULT=guardian-registered~1500ms"}, "exec", env, "--", "sh", "-c", "touch "+mark+"; sleep 300")
	var exOut strings.Builder
	ex.Stdout, ex.Stderr = &exOut, &exOut
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Process.Kill(); ex.Wait() })
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	if out, err := run(nil, "stop", env).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	stopTook := time.Since(t0)
	err := ex.Wait()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the workload ran although its environment was stopped before its release")
	}
	if code != 124 || !strings.Contains(exOut.String(), "before it started") {
		t.Errorf("exec stopped at its gate: exit %d (%v): %q; want 124 and a line that it was stopped before it started", code, err, exOut.String())
	}
	out, err := run(nil, "ps", "--all", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("ps: %v: %s", err, out)
	}
	var recs []struct {
		State             string `json:"record_state"`
		ExitCode          *int   `json:"exit_code"`
		StopReason        string `json:"stop_reason"`
		StoppedByHostfork bool   `json:"stopped_by_hostfork"`
		Workload          any    `json:"workload"`
		Error             string `json:"error"`
	}
	if err := json.Unmarshal(out, &recs); err != nil || len(recs) != 1 {
		t.Fatalf("ps --all --json: %v: %s", err, out)
	}
	r := recs[0]
	if r.ExitCode != nil || r.Workload != nil || !r.StoppedByHostfork || r.StopReason != "user" || !strings.Contains(r.Error, "before it started") {
		t.Errorf("the record of a command stopped at its gate: %+v", r)
	}
	t.Logf("stop took %v; record %+v", stopTook, r)
}

// gateEnv makes a store, its cgroup parent and an environment for a test
// of launch gates, with run, which runs hostfork on that store with extra
// environment variables. The environment is stopped at the end.
func gateEnv(t *testing.T) (parent string, run func(extraEnv []string, args ...string) *exec.Cmd, env string) {
	t.Helper()
	testutil.RequireRoot(t)
	parent = testutil.CgroupParent(t)
	bin := hostforkForUser(t)
	root := t.TempDir()
	run = func(extraEnv []string, args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"--root", root}, args...)...)
		c.Env = append(append(os.Environ(), "HOSTFORK_CGROUP_PARENT="+parent), extraEnv...)
		return c
	}
	out, err := run(nil, "create", "--ttl", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("create: %v: %s", err, out)
	}
	env = strings.TrimSpace(string(out))
	t.Cleanup(func() { run(nil, "stop", env).Run() })
	return parent, run, env
}
