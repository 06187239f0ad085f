package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// faultScenario is one hostfork invocation that the matrix kills (SIGKILL,
// through a fault point) at every point it reaches.
type faultScenario struct {
	name string
	// points are the fault points this invocation reaches, in order.
	points []string
	// prepare runs what the scenario needs first (without a fault) and
	// returns the arguments of the invocation to kill. dir is a scratch
	// directory beside the store.
	prepare func(t *testing.T, c *hostforkCLI, dir string) []string
	// survivors: processes are expected to outlive the crash until reap
	// finishes the interrupted work. Otherwise the tree's own guardians
	// and keepers end everything (owner exit), and the test waits for that
	// before reaping, so that reap's outcome is deterministic.
	survivors bool
	// finish runs after the checks (a gc finishing its work, a stop).
	finish func(t *testing.T, c *hostforkCLI, dir string)
}

// overlayArgs are the flags of an overlay tree over dir/lower at
// dir/target, both made here.
func overlayArgs(t *testing.T, dir string) []string {
	t.Helper()
	for _, d := range []string{"lower", "target"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "lower", "base"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--tree", "t=overlay:" + filepath.Join(dir, "lower"), "--replace", filepath.Join(dir, "target") + "=t"}
}

func faultScenarios() []faultScenario {
	launch := []string{fault.CommandReserved, fault.GuardianStarted, fault.GuardianRegistered, fault.Released}
	create := []string{fault.CreateRecorded, fault.CreateCgroup}
	stop := []string{fault.StopRecorded, fault.StopKilled, fault.Finalize}
	return []faultScenario{
		{
			name:   "run",
			points: slices.Concat(create, launch),
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return []string{"run", "--", "sh", "-c", "setsid sleep 300 & sleep 300"}
			},
		},
		{
			// The leader exits at once and leaves a setsid daemon: run's own
			// stop of the environment is interrupted.
			name:   "run-daemon",
			points: stop,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return []string{"run", "--", "sh", "-c", "setsid sleep 300 & echo started"}
			},
		},
		{
			name:   "view",
			points: slices.Concat(create, []string{fault.TreePrepared, fault.KeeperStarted}, launch),
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return slices.Concat([]string{"run"}, overlayArgs(t, dir), []string{"--", "sleep", "300"})
			},
		},
		{
			// A worktree tree: SIGKILLed between 'git worktree add' and the
			// record, reap removes the worktree through git and deletes
			// the branch the creation made (nothing was committed on it).
			name:   "worktree",
			points: []string{fault.TreePrepared},
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				if _, err := exec.LookPath("git"); err != nil {
					testutil.Skip(t, "needs git")
				}
				repo := filepath.Join(dir, "repo")
				for _, d := range []string{repo, filepath.Join(dir, "target")} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				writeFile(filepath.Join(repo, "f.txt"), "base\n")
				for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"}} {
					if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
						t.Fatalf("git %v: %v: %s", args, err, out)
					}
				}
				return []string{"run", "--tree", "t=worktree:" + repo, "--replace", filepath.Join(dir, "target") + "=t", "--", "true"}
			},
			finish: func(t *testing.T, c *hostforkCLI, dir string) {
				repo := filepath.Join(dir, "repo")
				for args, want := range map[string]string{
					"branch --list hostfork/*":  "",
					"worktree list --porcelain": "worktree " + repo + "\nHEAD ",
					"status --porcelain":        "",
				} {
					out, err := exec.Command("git", append([]string{"-C", repo}, strings.Fields(args)...)...).CombinedOutput()
					if err != nil || !strings.HasPrefix(string(out), want) || (want != "" && strings.Count(string(out), "worktree ") != 1) || (want == "" && len(out) > 0) {
						t.Errorf("after reap, git %s: %v: %q (want %q)", args, err, out, want)
					}
				}
			},
		},
		{
			name:   "limits",
			points: slices.Concat(create, launch),
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return []string{"run", "--memory", "64M", "--", "sleep", "300"}
			},
		},
		{
			// Limit groups made, then the creation is interrupted before
			// the environment's record names them.
			name:   "view-limits",
			points: []string{fault.TreePrepared, fault.KeeperStarted},
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return slices.Concat([]string{"run", "--memory", "64M", "--pids", "64", "--cpus", "1"}, overlayArgs(t, dir), []string{"--", "sleep", "300"})
			},
		},
		{
			name:   "create",
			points: create,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				return []string{"create", "--ttl", "5m"}
			},
		},
		{
			name:   "exec",
			points: launch,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
				writeFile(filepath.Join(dir, "env"), env)
				return []string{"exec", env, "--", "sleep", "300"}
			},
			finish: func(t *testing.T, c *hostforkCLI, dir string) {
				// The environment itself was never interrupted: it stops
				// cleanly and leaves nothing.
				c.mustRun("stop", readFile(filepath.Join(dir, "env")))
				checkRecovered(t, c, nil, nil)
			},
		},
		{
			name:      "stop",
			points:    stop,
			survivors: true,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				args := slices.Concat([]string{"create", "--ttl", "5m", "--memory", "64M"}, overlayArgs(t, dir))
				env := strings.TrimSpace(c.mustRun(args...).stdout)
				pidFile := filepath.Join(dir, "leader.pid")
				c.mustRun("exec", "--detach", env, "--", "sh", "-c", "echo $$ > "+pidFile+"; setsid sleep 300 & sleep 300")
				waitPID(t, pidFile)
				return []string{"stop", env}
			},
		},
		{
			// A stop of one command (not of its environment), interrupted.
			name:      "stop-command",
			points:    []string{fault.StopRecorded, fault.StopKilled},
			survivors: true,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
				writeFile(filepath.Join(dir, "env"), env)
				pidFile := filepath.Join(dir, "leader.pid")
				id := strings.TrimSpace(c.mustRun("exec", "--detach", env, "--", "sh", "-c", "echo $$ > "+pidFile+"; setsid sleep 300 & sleep 300").stdout)
				waitPID(t, pidFile)
				return []string{"stop", id}
			},
			finish: func(t *testing.T, c *hostforkCLI, dir string) {
				// The stop that was decided is carried out: nothing of the
				// command runs on.
				if pids := c.procs(); len(pids) > 0 {
					t.Errorf("the command whose stop was interrupted still runs: %v", pids)
				}
				c.mustRun("stop", readFile(filepath.Join(dir, "env")))
				checkRecovered(t, c, nil, nil)
			},
		},
		{
			// A fork of an active environment with an overlay tree into
			// two children, interrupted at each step: reap thaws the
			// parent and removes every child's tree (no leaked snapshot
			// or copy); the parent runs on.
			name:      "fork",
			points:    []string{fault.ForkRecorded, fault.ForkFrozen, fault.ForkTreeTaken, fault.ForkThawed, fault.CreateCgroup, fault.KeeperStarted},
			survivors: true,
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				args := slices.Concat([]string{"create", "--ttl", "5m"}, overlayArgs(t, dir))
				env := strings.TrimSpace(c.mustRun(args...).stdout)
				writeFile(filepath.Join(dir, "env"), env)
				// (A command still running would leave its launch's
				// intents open, which the checks here count as unsettled;
				// TestForkBtrfsWhileWriting forks a running writer.)
				c.mustRun("exec", env, "--", "sh", "-c", "echo data > "+filepath.Join(dir, "target", "new"))
				return []string{"fork", env, "--count", "2"}
			},
			finish: func(t *testing.T, c *hostforkCLI, dir string) {
				env := readFile(filepath.Join(dir, "env"))
				rec := c.records().envs[env]
				if rec == nil || rec.State != api.EnvActive {
					t.Fatalf("the forked environment is not active after reap: %+v", rec)
				}
				if ev, err := cgroup.Open(filepath.Join(rec.CgroupPath, "commands")).Events(); err != nil || ev.Frozen {
					t.Errorf("the forked environment's commands are still frozen after reap (%+v, %v)", ev, err)
				}
				if ents, _ := os.ReadDir(filepath.Join(c.root, "trees")); len(ents) != 1 {
					t.Errorf("trees after reap: %d entries, want only the parent's", len(ents))
				}
				c.mustRun("stop", env)
				checkRecovered(t, c, nil, nil)
			},
		},
		{
			name:   "gc",
			points: []string{fault.GCDelete},
			prepare: func(t *testing.T, c *hostforkCLI, dir string) []string {
				args := slices.Concat([]string{"create", "--ttl", "5m"}, overlayArgs(t, dir))
				env := strings.TrimSpace(c.mustRun(args...).stdout)
				writeFile(filepath.Join(dir, "env"), env)
				c.mustRun("exec", env, "--", "sh", "-c", "echo data > "+filepath.Join(dir, "target", "new")+"; echo out; echo err >&2")
				c.mustRun("stop", env)
				return []string{"gc", "--force", env}
			},
			finish: func(t *testing.T, c *hostforkCLI, dir string) {
				// gc finishes what the killed gc decided.
				env := readFile(filepath.Join(dir, "env"))
				c.mustRun("gc", "--force", env)
				if got := c.query("select count(*) from envs where id = '" + env + "'"); got != "0" {
					t.Errorf("after the second gc, the environment's record is still there")
				}
				if ents, _ := os.ReadDir(filepath.Join(c.root, "trees")); len(ents) > 0 {
					t.Errorf("after the second gc, trees are left: %s", ents[0].Name())
				}
				if ents, _ := os.ReadDir(filepath.Join(c.root, "runs")); len(ents) > 0 {
					t.Errorf("after the second gc, run directories are left: %s", ents[0].Name())
				}
			},
		},
	}
}

// TestFaultMatrix kills hostfork (SIGKILL, through HOSTFORK_FAULT) at every
// fault point each scenario reaches, then runs reap and checks that the
// registry is consistent, that nothing the scenario made is left
// unaccounted for, that nothing recorded was lost, and that a second reap
// changes nothing (issue 5, fault injection).
func TestFaultMatrix(t *testing.T) {
	newCLI(t) // the requirements (root, a cgroup2 mount), checked once
	scenarios := faultScenarios()
	covered := map[string]bool{}
	for _, sc := range scenarios {
		for _, p := range sc.points {
			covered[p] = true
		}
	}
	for _, p := range fault.All {
		if !covered[p] {
			t.Errorf("no scenario reaches fault point %s", p)
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			for _, point := range sc.points {
				t.Run(point, func(t *testing.T) {
					t.Parallel()
					runFaultCase(t, sc, point)
				})
			}
		})
	}
}

func runFaultCase(t *testing.T, sc faultScenario, point string) {
	c := newCLI(t)
	cleanupV1(t, c)
	dir := filepath.Join(filepath.Dir(c.root), "scratch")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := sc.prepare(t, c, dir)

	res := c.runFaulted(point, args...)
	if !res.killed {
		t.Fatalf("hostfork %s with %s=%s did not die by SIGKILL: %v", strings.Join(args, " "), fault.Env, point, res)
	}
	if !sc.survivors {
		eventually(t, "the crashed invocation's guardians and keepers end their trees", func() string {
			if pids := c.procs(); len(pids) > 0 {
				return fmt.Sprintf("processes left: %v", pids)
			}
			return ""
		})
	}
	before := snapshotStore(t, c)

	rep := c.reap()
	checkRecovered(t, c, rep, before)
	if t.Failed() {
		t.Logf("reap: %+v", rep)
	}
	again := c.reap()
	if len(again.Actions) > 0 {
		t.Errorf("a second reap still acted: %+v (first reap: %+v)", again.Actions, rep.Actions)
	}
	checkRecovered(t, c, again, before)
	if sc.finish != nil && !t.Failed() {
		sc.finish(t, c, dir)
	}
}

// faultResult is how a faulted invocation ended.
type faultResult struct {
	killed         bool
	status         string
	stdout, stderr string
}

func (r faultResult) String() string {
	return fmt.Sprintf("%s\nstdout: %s\nstderr: %s", r.status, r.stdout, r.stderr)
}

// runFaulted runs hostfork with the fault point armed. Its output goes to
// files, so that no descendant holding a pipe can delay the result.
func (c *hostforkCLI) runFaulted(point string, args ...string) faultResult {
	c.t.Helper()
	cmd := c.command(args...)
	cmd.Env = append(cmd.Env, fault.Env+"="+point)
	dir := c.t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = out, errf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(60 * time.Second):
		// Safety bound: the point was never reached.
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("hostfork %s never reached fault point %s", strings.Join(args, " "), point)
	}
	r := faultResult{stdout: readFile(out.Name()), stderr: readFile(errf.Name()), status: "exit 0"}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		r.status = ee.String()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	} else if werr != nil {
		c.t.Fatal(werr)
	}
	return r
}

// reap runs reap --json and returns its report.
func (c *hostforkCLI) reap(env ...string) *hostfork.ReapReport {
	c.t.Helper()
	cmd := c.command("reap", "--json")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("reap: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	var rep hostfork.ReapReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		c.t.Fatalf("reap --json: %v\n%s", err, out.String())
	}
	return &rep
}

// storeRecords is the registry's content, decoded.
type storeRecords struct {
	envs    map[string]*api.Env
	cmds    map[string]*api.Command
	intents []registry.Intent
}

func (c *hostforkCLI) records() *storeRecords {
	c.t.Helper()
	s := &storeRecords{envs: map[string]*api.Env{}, cmds: map[string]*api.Command{}}
	if _, err := os.Stat(filepath.Join(c.root, registry.FileName)); err != nil {
		return s
	}
	ctx := context.Background()
	db, err := registry.Open(ctx, c.root)
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	envs, err := db.Envs(ctx, registry.EnvQuery{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range envs {
		s.envs[e.ID] = e
	}
	cmds, err := db.Commands(ctx, registry.CommandQuery{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, cm := range cmds {
		s.cmds[cm.ID] = cm
	}
	if s.intents, err = db.Intents(ctx, registry.IntentFilter{}); err != nil {
		c.t.Fatal(err)
	}
	return s
}

// storeSnapshot is what must survive recovery: every record and every
// file of the evidence.
type storeSnapshot struct {
	envs, cmds []string
	files      []string
}

func snapshotStore(t *testing.T, c *hostforkCLI) *storeSnapshot {
	t.Helper()
	recs := c.records()
	s := &storeSnapshot{}
	for id := range recs.envs {
		s.envs = append(s.envs, id)
	}
	for id := range recs.cmds {
		s.cmds = append(s.cmds, id)
	}
	_ = filepath.WalkDir(filepath.Join(c.root, "runs"), func(p string, d os.DirEntry, err error) error {
		// A stop decision is consumed once the stop it keeps is recorded;
		// everything else is evidence.
		if err == nil && d.Type().IsRegular() && d.Name() != "stop-decision" {
			s.files = append(s.files, p)
		}
		return nil
	})
	return s
}

// v1Hierarchies are the cgroup v1 hierarchies that hold hostfork's limit
// groups on a hybrid host.
var v1Hierarchies = []string{"memory", "cpu", "cpuacct", "pids"}

// v1Groups lists the v1 limit groups that exist for envID.
func v1Groups(envID string) []string {
	var out []string
	seen := map[string]bool{}
	for _, h := range v1Hierarchies {
		d := filepath.Join("/sys/fs/cgroup", h, "hostfork", envID)
		real, err := filepath.EvalSymlinks(d)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, d)
	}
	return out
}

// cleanupV1 removes, at cleanup, the v1 limit groups of the store's
// environments (after killing everything in the test's cgroup parent,
// which holds every process hostfork started for it).
func cleanupV1(t *testing.T, c *hostforkCLI) {
	t.Cleanup(func() {
		g := cgroup.Open(c.parent)
		if g.Exists() {
			_ = g.Kill()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = g.WaitEmpty(ctx)
			cancel()
		}
		killMarked(c.mark)
		recs := c.records()
		for id := range recs.envs {
			for _, d := range v1Groups(id) {
				// The commands' own groups (their OOM counters) first: a
				// v1 group with children can't be removed.
				subs, _ := filepath.Glob(filepath.Join(d, "*"))
				for _, sub := range subs {
					if st, err := os.Lstat(sub); err == nil && st.IsDir() {
						rmdirBusy(t, sub)
					}
				}
				rmdirBusy(t, d)
			}
		}
	})
}

// rmdirBusy removes the cgroup directory d, retrying while it is busy for
// up to 2 s, and reports one it could not remove.
func rmdirBusy(t *testing.T, d string) {
	var err error
	for try := 0; try < 100; try++ {
		err = unix.Rmdir(d)
		if err == nil || err == unix.ENOENT {
			return
		}
		if err != unix.EBUSY {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("cleanup: the v1 group %s was left behind: %v", d, err)
}

// checkRecovered checks the store after reap (DESIGN.md, The store; issue
// 5): rep is the reap's report (nil: no reap to compare with), before the
// snapshot taken before it (nil: nothing to compare); exempt lists live
// hostfork invocations of the test itself (they carry its mark).
func checkRecovered(t *testing.T, c *hostforkCLI, rep *hostfork.ReapReport, before *storeSnapshot, exempt ...int) {
	t.Helper()
	recs := c.records()
	pendingText := ""
	if rep != nil {
		for _, p := range rep.Pending {
			if p.Reason == "" {
				t.Errorf("reap reports %s of %s as pending without a reason", p.What, p.Env)
			}
			pendingText += p.Env + " " + p.What + "\n"
		}
	}
	reported := func(env, what string) bool {
		return strings.Contains(pendingText, env+" ") && strings.Contains(pendingText, what)
	}

	// (1) The registry is consistent.
	for _, e := range recs.envs {
		if e.State == api.EnvCreating || e.State == api.EnvStopping {
			t.Errorf("environment %s is still %s", e.ID, e.State)
		}
	}
	for _, cm := range recs.cmds {
		switch cm.State {
		case api.CommandReserved, api.CommandRunning:
			if cm.Guardian == nil || !sameProcessAlive(cm.Guardian.PID, cm.Guardian.StartTime) {
				t.Errorf("command %s is %s, but its guardian %v is gone and nothing settled it", cm.ID, cm.State, cm.Guardian)
			}
			if e := recs.envs[cm.Env]; e != nil && e.State != api.EnvActive {
				t.Errorf("command %s is %s in environment %s, which is %s", cm.ID, cm.State, e.ID, e.State)
			}
		case api.CommandUnverified:
			if !reported(cm.Env, cm.ID) {
				t.Errorf("command %s is unverified and reap does not report it as pending", cm.ID)
			}
		}
	}
	for _, in := range recs.intents {
		_, err := os.Stat(in.Target)
		exists := err == nil
		switch in.State {
		case registry.IntentPending:
			if rep != nil && !reported(in.EnvID, in.Target) {
				t.Errorf("intent %d (%s %s, environment %s, command %q) is pending and reap does not report it", in.ID, in.Kind, in.Target, in.EnvID, in.CommandID)
			}
		case registry.IntentCreated:
			if !exists {
				t.Errorf("intent %d says %s %s exists, but it is gone", in.ID, in.Kind, in.Target)
			}
		case registry.IntentReleased, registry.IntentAbandoned:
			if exists {
				t.Errorf("intent %d says %s %s is %s, but it exists", in.ID, in.Kind, in.Target, in.State)
			}
		}
	}

	// (2) Nothing made is left unaccounted for.
	// cgroups: an active environment's groups, and the groups of its
	// commands that are not finished.
	allowedCg := map[string]bool{c.parent: true}
	liveCmdGroups := map[string]*api.Command{}
	for _, e := range recs.envs {
		if e.State != api.EnvActive || e.CgroupPath == "" {
			continue
		}
		allowedCg[e.CgroupPath] = true
		allowedCg[filepath.Join(e.CgroupPath, "commands")] = true
		allowedCg[filepath.Join(e.CgroupPath, "guardians")] = true
		if e.Keeper != nil {
			allowedCg[filepath.Join(e.CgroupPath, "keeper")] = true
		}
	}
	for _, cm := range recs.cmds {
		if cm.Final() || cm.CgroupPath == "" {
			continue
		}
		if e := recs.envs[cm.Env]; e == nil || e.State != api.EnvActive {
			continue
		}
		liveCmdGroups[cm.CgroupPath] = cm
		allowedCg[cm.CgroupPath] = true
	}
	_ = filepath.WalkDir(c.parent, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && !allowedCg[p] {
			t.Errorf("cgroup %s is left, and no active environment or live command owns it", p)
		}
		return nil
	})
	for id, e := range recs.envs {
		var want []string
		if e.State == api.EnvActive && len(e.Limits) > 0 {
			var g limits.Group
			if err := json.Unmarshal(e.Limits, &g); err == nil {
				for _, d := range g.V1 {
					want = append(want, d)
				}
			}
		}
		for _, d := range v1Groups(id) {
			if !slices.Contains(want, d) {
				t.Errorf("cgroup v1 limit group %s is left (environment %s is %s)", d, id, e.State)
			}
		}
	}
	// Processes: in the cgroup parent, only the keepers of active
	// environments and the members of live commands; outside it, nothing
	// that carries this test's mark.
	accounted := map[int]bool{}
	for _, pid := range c.procs() {
		cg := c.cgroupOf(pid)
		if cg == "" {
			continue
		}
		ok := false
		for path := range liveCmdGroups {
			if cg == path || strings.HasPrefix(cg, path+"/") {
				ok = true
			}
		}
		for _, e := range recs.envs {
			if e.State == api.EnvActive && e.Keeper != nil && e.Keeper.PID == pid && cg == filepath.Join(e.CgroupPath, "keeper") {
				ok = true
			}
		}
		for _, cm := range liveCmdGroups {
			// A guardian lives beside its tree, in the environment's
			// guardians group.
			if cm.Guardian != nil && cm.Guardian.PID == pid && cg == filepath.Join(filepath.Dir(filepath.Dir(cm.CgroupPath)), "guardians") {
				ok = true
			}
		}
		if ok {
			accounted[pid] = true
		} else {
			t.Errorf("process %d (%s) in %s is left, and no live command or active environment owns it", pid, comm(pid), strings.TrimPrefix(cg, c.parent))
		}
	}
	for _, pid := range markedPIDs(c.mark) {
		if slices.Contains(exempt, pid) {
			continue
		}
		if cg := c.cgroupOf(pid); cg != "" && !strings.HasPrefix(cg, c.parent+"/") {
			t.Errorf("process %d (%s) carries the test's mark but is outside the test's cgroups (in %s)", pid, comm(pid), cg)
		}
	}
	// Mounts: the host never sees a view's mounts; a mount namespace that
	// shows the scenario's paths belongs to an accounted process.
	base := filepath.Dir(c.root)
	for pid, lines := range mountsMentioning(base) {
		if !accounted[pid] {
			t.Errorf("process %d (%s) has mounts of the scenario's paths and is not accounted for:\n%s", pid, comm(pid), strings.Join(lines, "\n"))
		}
	}
	// Trees and run directories: each is recorded.
	treeDirs := map[string]bool{}
	for _, e := range recs.envs {
		for _, tr := range e.Trees {
			var st struct {
				Dest string `json:"dest"`
			}
			if tr.State == "allocated" && json.Unmarshal(tr.Storage, &st) == nil {
				treeDirs[st.Dest] = true
			}
		}
	}
	for _, in := range recs.intents {
		if in.Kind == "tree" && in.State == registry.IntentPending && (rep == nil || reported(in.EnvID, in.Target)) {
			treeDirs[in.Target] = true // reported, with the reason, on every reap
		}
	}
	ents, _ := os.ReadDir(filepath.Join(c.root, "trees"))
	for _, ent := range ents {
		p := filepath.Join(c.root, "trees", ent.Name())
		if !treeDirs[p] {
			t.Errorf("tree directory %s is left, and no record or reported intent accounts for it", p)
		}
	}
	ents, _ = os.ReadDir(filepath.Join(c.root, "runs"))
	for _, ent := range ents {
		if e := recs.envs[ent.Name()]; e == nil {
			t.Errorf("run directory %s has no environment record", ent.Name())
		}
	}

	// (3) Nothing recorded was lost.
	for _, cm := range recs.cmds {
		if cm.Guardian == nil || cm.StdoutPath == "" {
			continue
		}
		for _, p := range []string{cm.StdoutPath, cm.StderrPath} {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("command %s ran, but its output file is missing: %v", cm.ID, err)
			}
		}
	}
	if before != nil {
		for _, id := range before.envs {
			if recs.envs[id] == nil {
				t.Errorf("environment record %s was lost", id)
			}
		}
		for _, id := range before.cmds {
			if recs.cmds[id] == nil {
				t.Errorf("command record %s was lost", id)
			}
		}
		for _, p := range before.files {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("evidence file was lost: %v", err)
			}
		}
	}
}

// markedPIDs lists the live processes whose environment holds the mark.
func markedPIDs(mark string) []int {
	needle := []byte("\x00" + markVar + "=" + mark + "\x00")
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(append([]byte{0}, b...), 0), needle) {
			continue
		}
		if processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// mountsMentioning returns, per process, the mountinfo lines that mention
// a path below base.
func mountsMentioning(base string) map[int][]string {
	out := map[int][]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/mountinfo")
		if err != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, base) {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			continue
		}
		out[pid] = lines
	}
	return out
}

// comm is a process's command name, for messages.
func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// TestReapConcurrent: two reaps started together over the same crashed
// store both succeed, and leave the state a single reap leaves: consistent,
// nothing unaccounted, and a third reap has nothing to do.
func TestReapConcurrent(t *testing.T) {
	c := newCLI(t)
	cleanupV1(t, c)
	dir := filepath.Join(filepath.Dir(c.root), "scratch")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Several crashes, each leaving something to finish.
	for _, p := range []string{fault.CreateRecorded, fault.CreateCgroup, fault.GuardianStarted, fault.Released} {
		if r := c.runFaulted(p, "run", "--memory", "64M", "--", "sleep", "300"); !r.killed {
			t.Fatalf("%s: %v", p, r)
		}
	}
	args := slices.Concat([]string{"create", "--ttl", "5m"}, overlayArgs(t, dir))
	env := strings.TrimSpace(c.mustRun(args...).stdout)
	pidFile := filepath.Join(dir, "leader.pid")
	c.mustRun("exec", "--detach", env, "--", "sh", "-c", "echo $$ > "+pidFile+"; setsid sleep 300 & sleep 300")
	waitPID(t, pidFile)
	if r := c.runFaulted(fault.StopRecorded, "stop", env); !r.killed {
		t.Fatalf("stop: %v", r)
	}
	before := snapshotStore(t, c)

	var wg sync.WaitGroup
	reps := make([]*hostfork.ReapReport, 2)
	results := make([]cliResult, 2)
	for i := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run("reap", "--json")
		}()
	}
	wg.Wait()
	var actions []hostfork.ReapAction
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("reap %d: %v", i, r)
		}
		reps[i] = &hostfork.ReapReport{}
		if err := json.Unmarshal([]byte(r.stdout), reps[i]); err != nil {
			t.Fatalf("reap %d: %v\n%s", i, err, r.stdout)
		}
		actions = append(actions, reps[i].Actions...)
	}
	t.Logf("the two reaps acted %d times together: %+v", len(actions), actions)
	// A stop that completes twice, or a creation abandoned twice, would
	// show as the same action in both reports.
	seen := map[string]int{}
	for _, a := range actions {
		seen[a.Env+" "+a.Command+" "+a.Action+" "+a.Detail]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("the same action ran %d times: %s", n, k)
		}
	}
	third := c.reap()
	if len(third.Actions) > 0 {
		t.Errorf("a third reap still acted: %+v", third.Actions)
	}
	checkRecovered(t, c, third, before)
	if got := c.query("select state from envs where id = '" + env + "'"); got != "stopped" {
		t.Errorf("the interrupted stop was not completed: %s", got)
	}
}

// TestReapDuringLiveExec: a reap while a foreground exec runs leaves the
// live command alone: its workload keeps running, its record stays
// running, and reap reports no action on it.
func TestReapDuringLiveExec(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
	pidFile := filepath.Join(dir, "leader.pid")
	live := c.command("exec", env, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 300")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	leader := waitPID(t, pidFile)
	st := startTime(leader)
	var id string
	eventually(t, "the command is alive", func() string {
		rows := c.ps(false)
		if len(rows) != 1 || rows[0].State != "alive" || rows[0].PID != leader {
			return fmt.Sprintf("ps: %+v", rows)
		}
		id = rows[0].ID
		return ""
	})
	for i := 0; i < 2; i++ {
		rep := c.reap()
		for _, a := range rep.Actions {
			if a.Env == env {
				t.Errorf("reap %d acted on the live environment: %+v", i, a)
			}
		}
		if !sameProcessAlive(leader, st) {
			t.Fatalf("after reap %d, the live workload %d is gone", i, leader)
		}
		if live.ProcessState != nil {
			t.Fatalf("after reap %d, the exec returned", i)
		}
		if got := c.query("select state from commands where id = '" + id + "'"); got != "running" {
			t.Errorf("after reap %d, the live command's record is %s", i, got)
		}
	}
	checkRecovered(t, c, nil, nil, live.Process.Pid)
	// The exec still works: stopping the command ends it and the exec
	// returns 124, hostfork having ended it (docs/exit-codes.md).
	c.mustRun("stop", id)
	err := live.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Errorf("exec after stop: %v, want exit status 124", err)
	}
	if sameProcessAlive(leader, st) {
		t.Errorf("stop left the workload running")
	}
}

// TestReapAfterUnregisteredCrash: a run that crashed before its guardian's
// registration committed never released its workload, in this boot or
// after a restart: the registration (with the environment's activation)
// is durable before the release, so no power loss can take back one
// whose workload ran. Reaped in either boot, the command failed, never
// released, and its environment was never active.
func TestReapAfterUnregisteredCrash(t *testing.T) {
	for _, otherBoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("other-boot=%v", otherBoot), func(t *testing.T) {
			c := newCLI(t)
			cleanupV1(t, c)
			res := c.runFaulted(fault.GuardianStarted, "run", "--", "/bin/true")
			if !res.killed {
				t.Fatalf("run with %s=%s did not die by SIGKILL: %v", fault.Env, fault.GuardianStarted, res)
			}
			eventually(t, "the crashed run's guardian ends at its gate", func() string {
				if pids := c.procs(); len(pids) > 0 {
					return fmt.Sprintf("processes left: %v", pids)
				}
				return ""
			})
			var env []string
			if otherBoot {
				env = append(env, linux.BootIDEnv+"="+"00000000-0000-4000-8000-"+strconv.FormatInt(time.Now().UnixNano()%1e12, 10))
			}
			rep := c.reap(env...)
			t.Logf("reap: %+v", rep)
			recs := c.records()
			if len(recs.envs) != 1 || len(recs.cmds) != 1 {
				t.Fatalf("records: %d environments, %d commands; want one of each", len(recs.envs), len(recs.cmds))
			}
			for _, e := range recs.envs {
				const wantErr = "its creator exited before the environment was active"
				if e.State != api.EnvFailed || !strings.Contains(e.Error, wantErr) {
					t.Errorf("environment %s: %s, error %q; want failed with %q", e.ID, e.State, e.Error, wantErr)
				}
			}
			for _, cm := range recs.cmds {
				if cm.State != api.CommandFailed || cm.TreeEvidence != "never released" {
					t.Errorf("command %s: %s (%s), want failed, never released", cm.ID, cm.State, cm.TreeEvidence)
				}
			}
			if again := c.reap(env...); len(again.Actions) > 0 {
				t.Errorf("a second reap still acted: %+v", again.Actions)
			}
		})
	}
}

// TestEventsAfterSimulatedReboot: the event sequence goes on without a gap
// in a new boot, also after a run that crashed once its workload was
// released, and a follower resuming with --since its last number gets
// every new event. Every commit that records events is synced (decision
// 62, retired), so no number a follower saw can be taken back by a power
// loss and given out again.
func TestEventsAfterSimulatedReboot(t *testing.T) {
	c := newCLI(t)
	seqs := func(since int64, env ...string) []int64 {
		t.Helper()
		cmd := c.command("events", "--json", "--since", strconv.FormatInt(since, 10))
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("events --since %d: %v", since, err)
		}
		var got []int64
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l == "" {
				continue
			}
			var ev struct {
				Seq int64 `json:"seq"`
			}
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("events --json line %q: %v", l, err)
			}
			got = append(got, ev.Seq)
		}
		return got
	}
	dense := func(what string, s []int64) {
		t.Helper()
		for i := 1; i < len(s); i++ {
			if s[i] != s[i-1]+1 {
				t.Errorf("%s: seq %d after %d, want consecutive numbers within a boot", what, s[i], s[i-1])
			}
		}
	}
	c.mustRun("run", "--", "/bin/true")
	if res := c.runFaulted(fault.Released, "run", "--", "/bin/true"); !res.killed {
		t.Fatalf("run with %s=%s did not die by SIGKILL: %v", fault.Env, fault.Released, res)
	}
	eventually(t, "the crashed run's guardian ends", func() string {
		if pids := c.procs(); len(pids) > 0 {
			return fmt.Sprintf("processes left: %v", pids)
		}
		return ""
	})
	before := seqs(0)
	if len(before) == 0 {
		t.Fatal("a run recorded no event")
	}
	dense("the first boot", before)
	last := before[len(before)-1]

	other := linux.BootIDEnv + "=" + "00000000-0000-4000-8000-" + strconv.FormatInt(time.Now().UnixNano()%1e12, 10)
	c.reap(other)
	for range 2 {
		cmd := c.command("run", "--", "/bin/true")
		cmd.Env = append(cmd.Env, other)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run in the simulated boot: %v: %s", err, out)
		}
	}
	after := seqs(last, other)
	if len(after) == 0 {
		t.Fatalf("events --since %d shows none of the new boot's events", last)
	}
	if after[0] != last+1 {
		t.Errorf("the new boot's first event is seq %d after %d: the sequence has a gap", after[0], last)
	}
	dense("the simulated boot", after)
	if again := seqs(0, other); len(again) != len(before)+len(after) {
		t.Errorf("events from 0: %d, want %d (no event lost or repeated)", len(again), len(before)+len(after))
	}
}

// TestReapAfterSimulatedReboot: with another boot id, every record of the
// "previous boot" is released without signalling anything: the processes
// (still running, since the boot did not really change) stay alive, the
// commands are recorded as exited with tree evidence "boot id changed" and
// the environments are stopped. The test kills its processes afterwards.
func TestReapAfterSimulatedReboot(t *testing.T) {
	c := newCLI(t)
	cleanupV1(t, c)
	dir := filepath.Join(filepath.Dir(c.root), "scratch")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type proc struct {
		what string
		pid  int
		st   uint64
	}
	var procs []proc
	track := func(what string, pid int) { procs = append(procs, proc{what, pid, startTime(pid)}) }

	// A detached run with a setsid daemon, under a deadline.
	c.mustRun("run", "--detach", "--ttl", "5m", "--", "sh", "-c",
		"echo $$ > "+filepath.Join(dir, "a.pid")+"; setsid sh -c 'echo $$ > "+filepath.Join(dir, "a-daemon.pid")+"; exec sleep 300' & exec sleep 300")
	track("detached leader", waitPID(t, filepath.Join(dir, "a.pid")))
	track("setsid daemon", waitPID(t, filepath.Join(dir, "a-daemon.pid")))
	// An environment with a view and limits, and a command in it, with no
	// deadline.
	args := slices.Concat([]string{"create", "--until-stopped", "--memory", "64M"}, overlayArgs(t, dir))
	env := strings.TrimSpace(c.mustRun(args...).stdout)
	c.mustRun("exec", "--detach", env, "--", "sh", "-c", "echo $$ > "+filepath.Join(dir, "b.pid")+"; exec sleep 300")
	track("command in a view", waitPID(t, filepath.Join(dir, "b.pid")))

	recs := c.records()
	for _, e := range recs.envs {
		if e.Keeper != nil {
			track("keeper", e.Keeper.PID)
		}
	}
	eventually(t, "every command is alive", func() string {
		for _, r := range c.ps(true) {
			if r.State != "alive" {
				return fmt.Sprintf("ps: %+v", r)
			}
		}
		return ""
	})
	for _, cm := range c.records().cmds {
		if cm.Guardian == nil {
			t.Fatalf("command %s has no guardian", cm.ID)
		}
		track("guardian of "+cm.ID, cm.Guardian.PID)
	}
	before := snapshotStore(t, c)

	rep := c.reap(linux.BootIDEnv + "=" + "00000000-0000-4000-8000-" + strconv.FormatInt(time.Now().UnixNano()%1e12, 10))
	t.Logf("reap in the simulated boot: %+v", rep)
	for _, p := range procs {
		if !sameProcessAlive(p.pid, p.st) {
			t.Errorf("the %s (%d) was signalled by a reap in another boot", p.what, p.pid)
		}
	}
	recs = c.records()
	for _, e := range recs.envs {
		if e.State != api.EnvStopped {
			t.Errorf("environment %s of the previous boot is %s, want stopped", e.ID, e.State)
		}
	}
	for _, cm := range recs.cmds {
		if cm.State != api.CommandExited || cm.TreeState != api.PhaseExited || cm.TreeEvidence != "boot id changed" {
			t.Errorf("command %s of the previous boot: state %s, tree %s (%s); want exited, with evidence %q", cm.ID, cm.State, cm.TreeState, cm.TreeEvidence, "boot id changed")
		}
	}
	for _, id := range before.cmds {
		if recs.cmds[id] == nil {
			t.Errorf("command record %s was lost", id)
		}
	}
	for _, p := range before.files {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("evidence file was lost: %v", err)
		}
	}
	// The processes belong to the test: it ends them (cleanup does too).
	_ = cgroup.Open(c.parent).Kill()
}

// An export killed by SIGKILL while it copies an overlay tree (issue 39,
// item 12) leaves its in-progress marker and the empty directory its
// temporary keeper mounted on; reap records the export as failed, removes
// both, and says so; a second reap has nothing left to do.
func TestReapAfterKilledExport(t *testing.T) {
	c := newCLI(t)
	src, target := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := strings.TrimSpace(c.mustRun("create", "--tree", "t=overlay:"+src, "--replace", target+"=t", "--ttl", "5m").stdout)
	c.mustRun("stop", env)
	dest := filepath.Join(t.TempDir(), "out")
	res := c.runFaulted(fault.ExportCopying, "export", env, "t", "--to", dest)
	if !res.killed {
		t.Fatalf("export with %s=%s did not die by SIGKILL: %v", fault.Env, fault.ExportCopying, res)
	}
	views, _ := filepath.Glob(filepath.Join(c.root, ".export-view-*"))
	marks, _ := filepath.Glob(filepath.Join(c.root, "runs", env, "exports", "*.inprogress"))
	if len(views) != 1 || len(marks) != 1 {
		t.Fatalf("the killed export should leave one view directory and one marker: %v %v", views, marks)
	}
	// The temporary keeper ends with its owner (the export).
	eventually(t, "the export's temporary keeper ends", func() string {
		if pids := c.procs(); len(pids) > 0 {
			return fmt.Sprintf("processes left: %v", pids)
		}
		return ""
	})
	rep := c.reap()
	var settled, removed bool
	for _, a := range rep.Actions {
		settled = settled || a.Action == "settled-export"
		removed = removed || a.Action == "removed-export-view"
	}
	if !settled || !removed {
		t.Errorf("reap did not settle the export: %+v", rep)
	}
	for _, p := range append(views, marks...) {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after reap", p)
		}
	}
	recs, _ := filepath.Glob(filepath.Join(c.root, "runs", env, "exports", "*.json"))
	if len(recs) != 1 {
		t.Fatalf("export records: %v", recs)
	}
	var er hostfork.ExportResult
	if b, err := os.ReadFile(recs[0]); err != nil || json.Unmarshal(b, &er) != nil || er.Label != api.ExportFailed || len(er.Errors) == 0 {
		t.Errorf("the interrupted export's record: %+v %v", er, err)
	}
	if rep := c.reap(); len(rep.Actions) != 0 {
		t.Errorf("a second reap still acted: %+v", rep.Actions)
	}
}
