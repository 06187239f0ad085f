package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cli"
)

// Real-kernel tests of issue 4 (bounds): deadlines, the stop protocol,
// limits with kernel evidence, the capture contract and admission, all
// through the hostfork command.

// deadlineSafety is the generous bound past the deadline within which the
// tree must be gone (a safety net, not a performance expectation).
const deadlineSafety = 10 * time.Second

// termIgnoringTree is a shell command line for a tree (the leader and a
// setsid daemon) that ignores SIGTERM; each writes its PID to dir.
func termIgnoringTree(dir string) string {
	return "trap '' TERM; echo $$ > " + filepath.Join(dir, "leader.pid") +
		"; setsid sh -c 'echo $$ > " + filepath.Join(dir, "daemon.pid") + "; exec sleep 300' & sleep 300"
}

// waitTreeGone waits until the processes and the test's cgroups are empty,
// failing after bound.
func waitTreeGone(t *testing.T, c *hostforkCLI, bound time.Duration, pids ...int) time.Time {
	t.Helper()
	sts := make([]uint64, len(pids))
	for i, p := range pids {
		sts[i] = startTime(p)
	}
	end := time.Now().Add(bound)
	for {
		alive := []int{}
		for i, p := range pids {
			if sameProcessAlive(p, sts[i]) {
				alive = append(alive, p)
			}
		}
		procs := c.procs()
		if len(alive) == 0 && len(procs) == 0 {
			return time.Now()
		}
		if time.Now().After(end) {
			t.Fatalf("the tree is not gone within %v: processes %v alive, cgroup members %v", bound, alive, procs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jsonAt looks up a dotted path (see jsonLookup) in a decoded JSON value.
func jsonAt(v any, path string) any {
	x, _ := jsonLookup(v, path)
	return x
}

// checkDeadlineRecords runs reap and checks that the environment and its
// commands record the deadline as the stop reason.
func checkDeadlineRecords(t *testing.T, c *hostforkCLI, env string) {
	t.Helper()
	rep := c.reap()
	t.Logf("reap after the deadline: %+v", rep)
	st := c.status(env)
	if st["state"] != "stopped" || st["stop_reason"] != "deadline" {
		t.Errorf("environment after the deadline: state %v, stop reason %v; want stopped, deadline", st["state"], st["stop_reason"])
	}
	cmds, _ := st["commands"].([]any)
	if len(cmds) == 0 {
		t.Fatalf("the environment has no commands: %v", st)
	}
	for _, x := range cmds {
		cm := x.(map[string]any)
		if cm["stop_reason"] != "deadline" || cm["tree_state"] != "exited" {
			t.Errorf("command %v after the deadline: stop reason %v, tree %v (%v); want deadline, exited", cm["id"], cm["stop_reason"], cm["tree_state"], cm["tree_evidence"])
		}
	}
}

// TestDeadline: an environment with --ttl 3s whose tree ignores SIGTERM
// is gone within the ttl plus a safety bound, whatever happens to its
// creator and the registry, and the record afterwards says deadline.
func TestDeadline(t *testing.T) {
	const ttl = 3 * time.Second
	t.Run("creator-killed", func(t *testing.T) {
		t.Parallel()
		// A foreground run that lets its tree outlive it (owner exit
		// detach), SIGKILLed as soon as its tree runs: nothing but the
		// guardian is left to enforce the deadline.
		c := newCLI(t)
		dir := t.TempDir()
		start := time.Now()
		run := c.command("run", "--ttl", "3s", "--owner-exit", "detach", "--output", "files", "--", "sh", "-c", termIgnoringTree(dir))
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
		leader := waitPID(t, filepath.Join(dir, "leader.pid"))
		daemon := waitPID(t, filepath.Join(dir, "daemon.pid"))
		if err := run.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = run.Wait()
		gone := waitTreeGone(t, c, time.Until(start.Add(ttl+deadlineSafety)), leader, daemon)
		t.Logf("tree gone %v after the run started (ttl %v)", gone.Sub(start).Round(time.Millisecond), ttl)
		rows := c.ps(true)
		if len(rows) != 1 {
			t.Fatalf("ps --all: %+v", rows)
		}
		checkDeadlineRecords(t, c, rows[0].Env)
	})
	t.Run("create-exec-view", func(t *testing.T) {
		t.Parallel()
		// create returns at once; a detached command in an environment
		// with a view (its keeper enforces the deadline too).
		c := newCLI(t)
		dir := t.TempDir()
		start := time.Now()
		env := strings.TrimSpace(c.mustRun(append([]string{"create", "--ttl", "3s"}, overlayArgs(t, dir)...)...).stdout)
		c.mustRun("exec", "--detach", env, "--", "sh", "-c", termIgnoringTree(dir))
		leader := waitPID(t, filepath.Join(dir, "leader.pid"))
		daemon := waitPID(t, filepath.Join(dir, "daemon.pid"))
		gone := waitTreeGone(t, c, time.Until(start.Add(ttl+deadlineSafety)), leader, daemon)
		t.Logf("tree gone %v after create started (ttl %v)", gone.Sub(start).Round(time.Millisecond), ttl)
		checkDeadlineRecords(t, c, env)
	})
	t.Run("registry-locked", func(t *testing.T) {
		t.Parallel()
		// Another process holds an EXCLUSIVE transaction on the registry
		// through the whole deadline: the deadline must not need it.
		c := newCLI(t)
		dir := t.TempDir()
		start := time.Now()
		env := strings.TrimSpace(c.mustRun("create", "--ttl", "3s").stdout)
		c.mustRun("exec", "--detach", env, "--", "sh", "-c", termIgnoringTree(dir))
		leader := waitPID(t, filepath.Join(dir, "leader.pid"))
		daemon := waitPID(t, filepath.Join(dir, "daemon.pid"))

		release := holdRegistryLock(t, c)
		locked := time.Now()
		gone := waitTreeGone(t, c, time.Until(start.Add(ttl+deadlineSafety)), leader, daemon)
		release()
		t.Logf("tree gone %v after create started (ttl %v), registry locked from %v to the end",
			gone.Sub(start).Round(time.Millisecond), ttl, locked.Sub(start).Round(time.Millisecond))
		checkDeadlineRecords(t, c, env)
	})
}

// TestStopGrace: stop --grace 1s ends a tree that ignores SIGTERM within
// the grace budget (plus a safety bound), and stops a tree whose
// processes are stopped (SIGSTOP) or whose cgroup is frozen.
func TestStopGrace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(dir string) string
		before func(t *testing.T, c *hostforkCLI, cmdID string, pids []int)
		// signals are the leader's possible terminating signals.
		signals []int
		// fullGrace: SIGTERM can't end the tree, so the stop must wait
		// the whole grace before the kill.
		fullGrace bool
	}{
		{name: "ignores-term", script: termIgnoringTree, signals: []int{int(syscall.SIGKILL)}, fullGrace: true},
		{
			name: "sigstopped",
			script: func(dir string) string {
				return "echo $$ > " + filepath.Join(dir, "leader.pid") + "; setsid sh -c 'echo $$ > " + filepath.Join(dir, "daemon.pid") + "; exec sleep 300' & sleep 300"
			},
			before: func(t *testing.T, c *hostforkCLI, cmdID string, pids []int) {
				for _, p := range pids {
					if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
				}
				eventually(t, "the tree is stopped", func() string {
					for _, p := range pids {
						if s := procState(p); s != "T" {
							return fmt.Sprintf("process %d is in state %s", p, s)
						}
					}
					return ""
				})
			},
			// A stopped process does not act on SIGTERM: only the kill
			// ends it.
			signals:   []int{int(syscall.SIGKILL)},
			fullGrace: true,
		},
		{
			name: "cgroup-frozen",
			script: func(dir string) string {
				return "echo $$ > " + filepath.Join(dir, "leader.pid") + "; setsid sh -c 'echo $$ > " + filepath.Join(dir, "daemon.pid") + "; exec sleep 300' & sleep 300"
			},
			before: func(t *testing.T, c *hostforkCLI, cmdID string, pids []int) {
				wl := c.query("select cgroup_path from commands where id = '" + cmdID + "'")
				if err := os.WriteFile(filepath.Join(wl, "cgroup.freeze"), []byte("1"), 0); err != nil {
					t.Fatal(err)
				}
				eventually(t, "the workload group is frozen", func() string {
					if b := readFile(filepath.Join(wl, "cgroup.events")); !strings.Contains(b, "frozen 1") {
						return "cgroup.events: " + b
					}
					return ""
				})
			},
			// The kernel delivers a fatal signal to a frozen task (SIGTERM
			// with its default action is one), so the tree may end at the
			// SIGTERM already.
			signals: []int{int(syscall.SIGTERM), int(syscall.SIGKILL)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			dir := t.TempDir()
			env := strings.TrimSpace(c.mustRun("run", "--detach", "--ttl", "5m", "--", "sh", "-c", tc.script(dir)).stdout)
			leader := waitPID(t, filepath.Join(dir, "leader.pid"))
			daemon := waitPID(t, filepath.Join(dir, "daemon.pid"))
			var cmdID string
			eventually(t, "the command is alive", func() string {
				rows := c.ps(false)
				if len(rows) != 1 || rows[0].State != "alive" {
					return fmt.Sprintf("ps: %+v", rows)
				}
				cmdID = rows[0].ID
				return ""
			})
			if tc.before != nil {
				tc.before(t, c, cmdID, []int{leader, daemon})
			}
			const grace = time.Second
			t0 := time.Now()
			r := c.run("stop", "--grace", "1s", env)
			took := time.Since(t0)
			if r.code != 0 {
				t.Fatalf("stop --grace 1s: %v", r)
			}
			t.Logf("stop --grace %v took %v", grace, took.Round(time.Millisecond))
			if took > grace+deadlineSafety {
				t.Errorf("stop took %v, past the grace %v and the safety bound", took, grace)
			}
			if tc.fullGrace && took < grace {
				t.Errorf("stop took %v: it did not give the tree its grace of %v before the kill", took, grace)
			}
			waitTreeGone(t, c, time.Second, leader, daemon)
			st := c.status(cmdID)
			if st["tree_state"] != "exited" || st["stop_reason"] != "user" {
				t.Errorf("after stop: tree %v (%v), stop reason %v", st["tree_state"], st["tree_evidence"], st["stop_reason"])
			}
			if sig, _ := st["signal"].(float64); !slices.Contains(tc.signals, int(sig)) {
				t.Errorf("the leader's signal is %v, want one of %v", st["signal"], tc.signals)
			}
			if es := c.status(env); es["state"] != "stopped" {
				t.Errorf("environment after stop: %v", es["state"])
			}
			if ents, _ := os.ReadDir(c.parent); len(ents) > 0 {
				for _, e := range ents {
					if e.IsDir() {
						t.Errorf("cgroup left after stop: %s", e.Name())
					}
				}
			}
		})
	}
}

// procState is the state letter of /proc/PID/stat ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// limitDir returns the group that enforces the environment's limit on a
// controller, from its recorded limits: the v1 group on a hybrid host, the
// environment's cgroup2 group where the controller is on cgroup2.
func limitDir(t *testing.T, envStatus map[string]any, resource string) string {
	t.Helper()
	mech, _ := jsonAt(envStatus, "limits.mechanisms."+resource).(string)
	var dir string
	switch mech {
	case "cgroup1":
		dir, _ = jsonAt(envStatus, "limits.v1."+resource).(string)
	case "cgroup2":
		dir, _ = jsonAt(envStatus, "limits.v2").(string)
	}
	if dir == "" {
		t.Fatalf("no group enforces the %s limit (mechanism %q): %v", resource, mech, jsonAt(envStatus, "limits"))
	}
	return dir
}

// inGroup reports whether pid is a member of the cgroup directory dir or
// of a group below it (v1 or v2).
func inGroup(pid int, dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || found {
			return nil
		}
		for _, f := range strings.Fields(readFile(filepath.Join(p, "cgroup.procs"))) {
			if f == strconv.Itoa(pid) {
				found = true
			}
		}
		return nil
	})
	return found
}

func readUint(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(readFile(path)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestForkBombPids: a fork bomb under --pids 64 stays bounded and is
// stopped cleanly; status shows the counters live and as evidence after
// the stop.
func TestForkBombPids(t *testing.T) {
	c := newCLI(t)
	cleanupV1(t, c)
	dir := t.TempDir()
	trigger := filepath.Join(dir, "go")
	// The bomb waits for the trigger, so that the limit is verified before
	// anything forks.
	env := strings.TrimSpace(c.mustRun("run", "--detach", "--ttl", "5m", "--pids", "64", "--", "sh", "-c",
		"echo $$ > "+filepath.Join(dir, "leader.pid")+"; while [ ! -e "+trigger+" ]; do sleep 0.02; done; f() { f & f & sleep 300; }; f").stdout)
	leader := waitPID(t, filepath.Join(dir, "leader.pid"))
	st := c.status(env)
	pidsDir := limitDir(t, st, "pids")
	if got := strings.TrimSpace(readFile(filepath.Join(pidsDir, "pids.max"))); got != "64" {
		t.Fatalf("%s/pids.max is %q, want 64", pidsDir, got)
	}
	if !inGroup(leader, pidsDir) {
		t.Fatalf("the workload %d is not in the pids group %s", leader, pidsDir)
	}
	if err := writeFile(trigger, ""); err != nil {
		t.Fatal(err)
	}
	var peakSeen uint64
	sawMax := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		cur := readUint(t, filepath.Join(pidsDir, "pids.current"))
		peakSeen = max(peakSeen, cur)
		if cur > 64 {
			t.Fatalf("pids.current %d is above the limit 64", cur)
		}
		if n := len(c.procs()); n > 64 {
			t.Fatalf("%d processes in the environment, above the limit 64", n)
		}
		if ev := readFile(filepath.Join(pidsDir, "pids.events")); strings.Contains(ev, "max ") && !strings.Contains(ev, "max 0") {
			sawMax = true
		}
	}
	live := c.status(env)
	t.Logf("during the bomb: highest pids.current seen %d; status limits_now.pids %v", peakSeen, jsonAt(live, "limits_now.pids"))
	if jsonAt(live, "limits_now.pids.current") == nil {
		t.Errorf("status --json shows no limits_now.pids.current while running: %v (state %v, commands %v)", jsonAt(live, "limits_now"), live["state"], live["commands"])
	}
	if !sawMax {
		t.Errorf("the bomb never hit pids.max (pids.events: %s)", readFile(filepath.Join(pidsDir, "pids.events")))
	}
	t0 := time.Now()
	r := c.run("stop", env)
	if r.code != 0 {
		t.Fatalf("stop of the bomb: %v", r)
	}
	t.Logf("stop of the bomb took %v", time.Since(t0).Round(time.Millisecond))
	if pids := c.procs(); len(pids) > 0 {
		t.Fatalf("processes left after stop: %d", len(pids))
	}
	after := c.status(env)
	if after["state"] != "stopped" {
		t.Errorf("environment after stop: %v", after["state"])
	}
	if me, _ := jsonAt(after, "limit_evidence.pids.max_events").(float64); me == 0 {
		t.Errorf("limit_evidence shows no refused fork: %v", jsonAt(after, "limit_evidence.pids"))
	}
	if p, ok := jsonAt(after, "limit_evidence.pids.peak").(float64); ok && p > 64 {
		t.Errorf("pids peak %v above the limit", p)
	}
	if _, err := os.Stat(pidsDir); err == nil {
		t.Errorf("the pids group %s is left after stop", pidsDir)
	}
}

// TestHalfCPU: a busy loop under --cpus 0.5 gets about half a core,
// measured from the environment's own usage counter as status reports it.
func TestHalfCPU(t *testing.T) {
	c := newCLI(t)
	cleanupV1(t, c)
	env := strings.TrimSpace(c.mustRun("run", "--detach", "--ttl", "5m", "--cpus", "0.5", "--", "sh", "-c", "while :; do :; done").stdout)
	sample := func() (usage, periods, throttled float64, at time.Time) {
		st := c.status(env)
		at = time.Now()
		s, _ := jsonAt(st, "limits_now.cpu.usage").(string)
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("status --json shows no limits_now.cpu.usage duration: %v", jsonAt(st, "limits_now"))
		}
		u := float64(d.Nanoseconds())
		periods, _ = jsonAt(st, "limits_now.cpu.periods").(float64)
		throttled, _ = jsonAt(st, "limits_now.cpu.throttled").(float64)
		return u, periods, throttled, at
	}
	time.Sleep(300 * time.Millisecond) // past startup
	u0, p0, th0, t0 := sample()
	time.Sleep(2 * time.Second)
	u1, p1, th1, t1 := sample()
	ratio := (u1 - u0) / float64(t1.Sub(t0).Nanoseconds())
	t.Logf("busy loop under --cpus 0.5: %.3f cores; periods %v, throttled %v", ratio, p1-p0, th1-th0)
	if ratio > 0.7 {
		t.Errorf("the busy loop got %.3f cores under a 0.5 budget, want at most 0.7", ratio)
	}
	if ratio < 0.3 {
		// Below the budget is only wrong if the quota, not other load on
		// the host, held it back: then nearly every period is throttled.
		if dp := p1 - p0; dp == 0 || (th1-th0)/dp > 0.5 {
			t.Errorf("the busy loop got %.3f cores under a 0.5 budget while throttled in %v of %v periods", ratio, th1-th0, dp)
		} else {
			t.Logf("the host is busy: throttled in only %v of %v periods", th1-th0, dp)
		}
	}
	c.mustRun("stop", env)
	after := c.status(env)
	if s, _ := jsonAt(after, "limit_evidence.cpu.usage").(string); func() bool { d, err := time.ParseDuration(s); return err != nil || float64(d.Nanoseconds()) < u1 }() {
		t.Errorf("limit_evidence after stop: cpu usage %v, want at least %v", jsonAt(after, "limit_evidence.cpu"), u1)
	}
	if jsonAt(after, "limits_now") != nil {
		t.Errorf("limits_now is still shown after stop: %v", jsonAt(after, "limits_now"))
	}
}

// TestMemoryOOM: a memory hog under --memory 64M is OOM-killed and the
// record says so from the kernel's counter; a kill -9 (exit 137 too) is
// not called OOM.
func TestMemoryOOM(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		oom    bool
	}{
		// tail -c keeps the last 300 MiB of its input in memory.
		{"hog", "head -c 300M /dev/zero | tail -c 300M > /dev/null", true},
		{"kill-9", "kill -9 $$", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			cleanupV1(t, c)
			r := c.run("run", "--memory", "64M", "--", "sh", "-c", tc.script)
			if r.code != 137 {
				t.Fatalf("run: %v, want exit status 137", r)
			}
			rows := c.ps(true)
			if len(rows) != 1 {
				t.Fatalf("ps --all: %+v", rows)
			}
			st := c.status(rows[0].ID)
			t.Logf("%s: exit %v signal %v oom %v (%v)", tc.name, st["exit_code"], st["signal"], st["oom"], st["oom_evidence"])
			if st["oom"] != tc.oom {
				t.Errorf("oom is %v, want %v (evidence: %v)", st["oom"], tc.oom, st["oom_evidence"])
			}
			if ev, _ := st["oom_evidence"].(string); ev == "" {
				t.Errorf("no oom_evidence recorded")
			}
			env := c.status(rows[0].Env)
			kills, _ := jsonAt(env, "limit_evidence.memory.oom_kills").(float64)
			if (kills > 0) != tc.oom {
				t.Errorf("limit_evidence memory: %v", jsonAt(env, "limit_evidence.memory"))
			}
		})
	}
}

// runCapture runs `hostfork run --capture` and decodes its JSON.
func (c *hostforkCLI) runCapture(args ...string) (map[string]any, cliResult) {
	c.t.Helper()
	r := c.run(append([]string{"run", "--capture", "--"}, args...)...)
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		c.t.Fatalf("run --capture: %v\n%s", err, r.stderr)
	}
	return v, r
}

// TestCaptureContract: at most 16 MiB of a stream is taken back (the file
// keeps everything) and such a capture is marked incomplete; a descendant
// that keeps stdout open can't hold back the result past the final drain.
func TestCaptureContract(t *testing.T) {
	t.Run("50MiB", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		const total = 50 << 20
		v, r := c.runCapture("sh", "-c", "yes 0123456789abcdef | head -c "+strconv.Itoa(total))
		// An incomplete capture is not a complete result: 120, with the
		// command's own status in the JSON (docs/exit-codes.md).
		if r.code != 120 || v["exit_code"] != 0.0 || !strings.Contains(r.stderr, "the capture is incomplete") {
			t.Fatalf("run --capture: exit %d, exit_code %v, stderr %s; want 120, 0 and a note", r.code, v["exit_code"], r.stderr)
		}
		out, _ := v["stdout"].(string)
		if len(out) != 16<<20 {
			t.Errorf("captured stdout is %d bytes, want 16 MiB", len(out))
		}
		if s := jsonAt(v, "capture.stdout.state"); s != "incomplete" || v["complete"] != false {
			t.Errorf("stdout capture state %v, complete %v; want incomplete, false", s, v["complete"])
		}
		artifact, _ := jsonAt(v, "capture.stdout.artifact").(string)
		fi, err := os.Stat(artifact)
		if err != nil || fi.Size() != total {
			t.Errorf("stdout artifact %s: %v, size %v; want %d bytes", artifact, err, fi.Size(), total)
		}
		if b, _ := jsonAt(v, "capture.stdout.bytes").(float64); b < 16<<20 {
			t.Errorf("capture counted %v bytes, want at least 16 MiB", b)
		}
		if rc, _ := v["receipt"].(string); rc == "" || readFile(rc) == "" {
			t.Errorf("an incomplete capture left no receipt (%v)", v["receipt"])
		}
	})
	t.Run("descendant-holds-stdout", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		t0 := time.Now()
		v, r := c.runCapture("sh", "-c", "echo hi; sleep 300 &")
		took := time.Since(t0)
		t.Logf("result after %v", took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("the result took %v although the leader exited at once", took)
		}
		if r.code != 120 || v["exit_code"] != 0.0 || v["stdout"] != "hi\n" {
			t.Errorf("exit %d, exit_code %v, stdout %q; want 120 (incomplete), 0, hi", r.code, v["exit_code"], v["stdout"])
		}
		if s := jsonAt(v, "capture.stdout.state"); s != "incomplete" {
			t.Errorf("stdout capture state %v, want incomplete (a descendant still held it)", s)
		}
		if pids := c.procs(); len(pids) > 0 {
			t.Errorf("the descendant is left running: %v", pids)
		}
	})
}

// TestAdmissionOneSlot: with a share that gives one slot, a second agent
// run waits until the first ends (or fails at once with --admit fail, exit
// 117: docs/exit-codes.md),
// and pause holds new admission until resume.
func TestAdmissionOneSlot(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	c.mustRun("capacity") // creates the store and its config
	share := 1.0 / float64(runtime.NumCPU())
	if err := os.WriteFile(filepath.Join(c.root, "config.yaml"), []byte(fmt.Sprintf("admission: {share: %g}\n", share)), 0o600); err != nil {
		t.Fatal(err)
	}
	var capa map[string]any
	if err := json.Unmarshal([]byte(c.mustRun("capacity", "--json").stdout), &capa); err != nil {
		t.Fatal(err)
	}
	if capa["slots"] != 1.0 {
		t.Fatalf("capacity with share %g: %v slots, want 1", share, capa["slots"])
	}

	// background starts hostfork in the background with its stderr in a
	// file, and returns a function that waits for it.
	background := func(name string, args ...string) (wait func() int, stderr string) {
		cmd := c.command(args...)
		stderr = filepath.Join(dir, name+".stderr")
		f, err := os.Create(stderr)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() {
			_ = cmd.Wait()
			done <- cmd.ProcessState.ExitCode()
		}()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return func() int {
			select {
			case code := <-done:
				return code
			case <-time.After(60 * time.Second):
				t.Fatalf("%s did not finish", name)
				return -1
			}
		}, stderr
	}
	waitText := func(path, text string) {
		t.Helper()
		eventually(t, "waiting for "+text+" in "+filepath.Base(path), func() string {
			if !strings.Contains(readFile(path), text) {
				return readFile(path)
			}
			return ""
		})
	}

	release1 := filepath.Join(dir, "release1")
	first, firstErr := background("first", "run", "--workload", "agent", "--", "sh", "-c",
		"touch "+filepath.Join(dir, "first.started")+"; while [ ! -e "+release1+" ]; do sleep 0.02; done")
	eventually(t, "the first agent starts", func() string {
		if _, err := os.Stat(filepath.Join(dir, "first.started")); err != nil {
			return "not yet; its stderr: " + readFile(firstErr)
		}
		return ""
	})
	eventually(t, "the first agent counts as live", func() string {
		if rows := c.ps(false); len(rows) != 1 {
			return fmt.Sprintf("ps: %+v", rows)
		}
		return ""
	})

	// --admit fail: refused at once with 124.
	if r := c.run("run", "--workload", "agent", "--admit", "fail", "--", "touch", filepath.Join(dir, "refused")); r.code != cli.ExitAdmission {
		t.Errorf("run --admit fail with no free slot: %v, want exit %d", r, cli.ExitAdmission)
	}
	if _, err := os.Stat(filepath.Join(dir, "refused")); err == nil {
		t.Errorf("the refused command ran")
	}

	// The second waits for the slot.
	second, secondErr := background("second", "run", "--workload", "agent", "--", "touch", filepath.Join(dir, "second.ran"))
	waitText(secondErr, "waiting for admission")
	if _, err := os.Stat(filepath.Join(dir, "second.ran")); err == nil {
		t.Fatalf("the second agent ran while the only slot was taken")
	}
	if err := writeFile(release1, ""); err != nil {
		t.Fatal(err)
	}
	if code := first(); code != 0 {
		t.Errorf("first agent: exit %d", code)
	}
	if code := second(); code != 0 {
		t.Errorf("second agent: exit %d: %s", code, readFile(secondErr))
	}
	if _, err := os.Stat(filepath.Join(dir, "second.ran")); err != nil {
		t.Errorf("the second agent did not run after the first ended")
	}

	// pause holds new admission, also with free slots; resume releases it.
	c.mustRun("pause")
	if r := c.run("run", "--workload", "agent", "--admit", "fail", "--", "true"); r.code != cli.ExitAdmission {
		t.Errorf("run --admit fail while paused: %v, want exit %d", r, cli.ExitAdmission)
	}
	third, thirdErr := background("third", "run", "--workload", "agent", "--", "touch", filepath.Join(dir, "third.ran"))
	waitText(thirdErr, "waiting for admission")
	if _, err := os.Stat(filepath.Join(dir, "third.ran")); err == nil {
		t.Fatalf("an agent ran while admission was paused")
	}
	// Work that is not an agent workload is not gated.
	c.mustRun("run", "--", "true")
	c.mustRun("resume")
	if code := third(); code != 0 {
		t.Errorf("third agent after resume: exit %d: %s", code, readFile(thirdErr))
	}
	if _, err := os.Stat(filepath.Join(dir, "third.ran")); err != nil {
		t.Errorf("the paused agent did not run after resume")
	}
}
