package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A stop revokes launch gates still waiting: a command registered but not
// yet released when its environment's stop begins is never released, its
// launcher fails with the reason, and nothing of it runs.
func TestStopRevokesWaitingGates(t *testing.T) {
	parent, run, env := gateEnv(t)
	// The exec pauses with its guardian started at the gate, not yet
	// registered; meanwhile the environment is stopped.
	reached := filepath.Join(t.TempDir(), "reached")
	ex, exOut := startExec(t, run([]string{"HOSTFORK_FAULT=guardian-started~60s", fault.ReachedEnv + "=" + reached}, "exec", env, "--", "sleep", "300"))
	waitReached(t, reached)
	if out, err := run(nil, "stop", env).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	release(t, reached)
	code, err := waitExec(ex)
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

// An exec whose environment is stopped by another caller while it launches
// (after it found it active, before it made anything) exits 122,
// "stopped during the launch", never 125: the soak saw ENOENT on the
// guardians group and on the command's cgroup surface as internal errors.
func TestExecRacingItsEnvironmentsStop(t *testing.T) {
	_, run, env := gateEnv(t)
	reached := filepath.Join(t.TempDir(), "reached")
	ex, exOut := startExec(t, run([]string{"HOSTFORK_FAULT=launch-resolved~60s", fault.ReachedEnv + "=" + reached}, "exec", env, "--", "true"))
	waitReached(t, reached)
	if out, err := run(nil, "stop", env).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	release(t, reached)
	if code, err := waitExec(ex); code != 122 || !strings.Contains(exOut.String(), "not active") && !strings.Contains(exOut.String(), "stopped during the launch") && !strings.Contains(exOut.String(), "revoked") {
		t.Fatalf("exec racing its environment's stop: exit %d (%v): %s", code, err, exOut.String())
	}
	ps, err := run(nil, "ps", "--json").CombinedOutput()
	if err != nil || strings.TrimSpace(string(ps)) != "[]" {
		t.Fatalf("ps after the refused launch: %v: %s", err, ps)
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
	reached := filepath.Join(t.TempDir(), "reached")
	ex, exOut := startExec(t, run([]string{"HOSTFORK_FAULT=guardian-registered~60s", fault.ReachedEnv + "=" + reached}, "exec", env, "--", "sh", "-c", "touch "+mark+"; sleep 300"))
	waitReached(t, reached)
	t0 := time.Now()
	if out, err := run(nil, "stop", env).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	stopTook := time.Since(t0)
	release(t, reached)
	code, err := waitExec(ex)
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

// A guardian killed at its gate (not a hostfork stop: a signal from
// elsewhere) leaves a launch that started nothing. The launcher says so
// in one line and fails; the record is final, failed, never released,
// with no stop reason.
func TestGuardianKilledAtTheGate(t *testing.T) {
	_, run, env := gateEnv(t)
	mark := filepath.Join(t.TempDir(), "ran")
	reached := filepath.Join(t.TempDir(), "reached")
	ex, exOut := startExec(t, run([]string{"HOSTFORK_FAULT=guardian-registered~60s", fault.ReachedEnv + "=" + reached}, "exec", env, "--", "sh", "-c", "touch "+mark))
	waitReached(t, reached) // it stands there until the test removes reached
	type rec struct {
		State    string `json:"record_state"`
		Error    string `json:"error"`
		Evidence string `json:"tree_evidence"`
		Stop     string `json:"stop_reason"`
		ByHF     bool   `json:"stopped_by_hostfork"`
		Guardian *struct {
			PID int `json:"pid"`
		} `json:"guardian"`
	}
	var recs []rec
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := run(nil, "ps", "--json").CombinedOutput()
		if err == nil && json.Unmarshal(out, &recs) == nil && len(recs) == 1 && recs[0].Guardian != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the paused exec's guardian never showed: %s", out)
		}
	}
	// The guardian is this test's grandchild, killed by its PID.
	if err := syscall.Kill(recs[0].Guardian.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	release(t, reached)
	err := ex.Wait()
	if err == nil || !strings.Contains(exOut.String(), "ended at the launch gate before the release") {
		t.Errorf("exec whose guardian was killed at its gate: %v: %q", err, exOut.String())
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the workload ran")
	}
	out, err := run(nil, "ps", "--all", "--json").CombinedOutput()
	if err != nil || json.Unmarshal(out, &recs) != nil || len(recs) != 1 {
		t.Fatalf("ps --all --json: %v: %s", err, out)
	}
	// Whoever settles it first words the error (this test's own ps may):
	// the evidence is the same.
	if r := recs[0]; r.State != "failed" || r.Stop != "" || r.ByHF || r.Evidence != "never released (its receipt is empty)" {
		t.Errorf("record %+v", r)
	}
}

// waitReached waits for the file a paused fault point makes when the
// process gets there (fault.ReachedEnv): the launch then stands there
// until release, however long the start and the test's next step take
// under load.
func waitReached(t *testing.T, path string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(end) { // a safety bound only
			t.Fatalf("the launch never reached its paused fault point (%s)", path)
		}
	}
}

// release ends the pause at the fault point waitReached saw reached (the
// pause's duration is only a bound), once the test has done what must
// happen while the launch stands there.
func release(t *testing.T, reached string) {
	t.Helper()
	if err := os.Remove(reached); err != nil {
		t.Fatal(err)
	}
}

// startExec starts ex with its output collected (the buffer is read after
// waitExec); it is killed at the end if still running.
func startExec(t *testing.T, ex *exec.Cmd) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	out := &strings.Builder{}
	ex.Stdout, ex.Stderr = out, out
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Process.Kill(); ex.Wait() })
	return ex, out
}

// waitExec waits for ex: its exit status (-1 if it did not exit) and the
// error.
func waitExec(ex *exec.Cmd) (int, error) {
	err := ex.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), err
	}
	if err == nil {
		return 0, nil
	}
	return -1, err
}
