package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
	"github.com/habemus-papadum/hostfork/temporal/node"
)

// result waits for a workflow and returns its Result, also when it ended
// in an error that carries the Result as details.
func result(t *testing.T, ctx context.Context, c *cluster, run interface {
	GetID() string
	GetRunID() string
}) (*flow.Result, error) {
	t.Helper()
	return wait(ctx, c.c, c.c.GetWorkflow(ctx, run.GetID(), run.GetRunID()))
}

func sh(script string) flow.Command { return flow.Command{Argv: []string{"sh", "-c", script}} }

// checkPlacement checks that a workflow's environment and commands are on
// the node its result names, and nowhere else.
func checkPlacement(t *testing.T, c *cluster, wid string, res *flow.Result) {
	t.Helper()
	for name, n := range c.nodes {
		envs := n.envsOf(t, wid)
		if name != res.Node {
			if len(envs) != 0 {
				t.Errorf("%s: node %s has environments %v, but it ran on %s", wid, name, envs, res.Node)
			}
			continue
		}
		if len(envs) != 1 || envs[0].ID != res.Env || envs[0].State != hostfork.EnvStopped {
			t.Errorf("%s: node %s has %+v, want only %s, stopped", wid, name, envs, res.Env)
			continue
		}
		if len(envs[0].Commands) != len(res.Commands) {
			t.Errorf("%s: node %s has %d commands, the result %d", wid, name, len(envs[0].Commands), len(res.Commands))
			continue
		}
		for i, cmd := range envs[0].Commands {
			if cmd.ID != res.Commands[i].ID || !cmd.Final() {
				t.Errorf("%s: command %d on %s is %s (%s), the result's %s", wid, i, name, cmd.ID, cmd.State, res.Commands[i].ID)
			}
		}
	}
}

// probe calls Status and Logs on a node's queue, the way a workflow of
// one's own would.
func probe(ctx workflow.Context, nodeName, cmdID string) ([]flow.LogsResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: flow.NodeQueue(nodeName), StartToCloseTimeout: 30 * time.Second, ScheduleToStartTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var st flow.StatusResult
	if err := workflow.ExecuteActivity(actx, flow.ActivityStatus, flow.StatusRequest{ID: cmdID}).Get(ctx, &st); err != nil {
		return nil, err
	}
	if st.Command == nil || st.Command.ID != cmdID || !st.Command.Final() {
		return nil, fmt.Errorf("Status(%s) = %+v", cmdID, st)
	}
	var out []flow.LogsResult
	off := int64(0)
	for range 10 {
		var l flow.LogsResult
		if err := workflow.ExecuteActivity(actx, flow.ActivityLogs, flow.LogsRequest{Command: cmdID, Offset: off, Limit: 4}).Get(ctx, &l); err != nil {
			return nil, err
		}
		out = append(out, l)
		if l.EOF {
			break
		}
		off = l.Next
	}
	return out, nil
}

func clientOptions(id, queue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: queue}
}

// TestTwoNodes: four workflows on two nodes (two slots each); each runs its
// commands on the node its Create landed on, as the stores show. Status and
// Logs answer on the node's queue.
func TestTwoNodes(t *testing.T) {
	c := newCluster(t)
	c.node("a")
	c.node("b")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 4
	runs := make([]string, n)
	results := make([]*flow.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		runs[i] = fmt.Sprintf("two-nodes-%d", i)
		req := flow.Request{Commands: []flow.Command{sh("echo first $$"), sh("echo second; sleep 1")}}
		run := c.submit(ctx, runs[i], req)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := result(t, ctx, c, run)
			if err != nil {
				t.Errorf("%s: %v", runs[i], err)
				return
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	nodes := map[string]int{}
	for i, res := range results {
		nodes[res.Node]++
		if res.ExitStatus != 0 || len(res.Commands) != 2 || len(res.Placements) != 1 {
			t.Errorf("%s: result %+v", runs[i], res)
		}
		checkPlacement(t, c, runs[i], res)
	}
	t.Logf("placements: %v", nodes)

	// Status and Logs through a workflow of our own, on the node's queue.
	w := worker.New(c.c, "probe", worker.Options{})
	w.RegisterWorkflow(probe)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	res := results[0]
	run, err := c.c.ExecuteWorkflow(ctx, clientOptions("probe-0", "probe"), probe, res.Node, res.Commands[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []flow.LogsResult
	if err := run.Get(ctx, &chunks); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, l := range chunks {
		all.Write(l.Data)
	}
	if all.String() != "second\n" || len(chunks) != 2 || chunks[0].Next != 4 || !chunks[1].EOF {
		t.Fatalf("Logs chunks %+v (%q)", chunks, all.String())
	}
}

// TestPausedNode: with node a paused (hostfork pause on its store), new
// environments land on b only.
func TestPausedNode(t *testing.T) {
	c := newCluster(t)
	a := c.node("a")
	c.node("b")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := a.h.SetPaused(ctx, true); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("paused-%d", i)
		res, err := result(t, ctx, c, c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("true")}}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Node != "b" {
			t.Fatalf("%s ran on %s while a was paused", id, res.Node)
		}
		checkPlacement(t, c, id, res)
	}
	envs, err := a.h.Envs(ctx, hostfork.EnvFilter{})
	if err != nil || len(envs) != 0 {
		t.Fatalf("paused node a has environments %v (%v)", envs, err)
	}
	if err := a.h.SetPaused(ctx, false); err != nil {
		t.Fatal(err)
	}
}

// TestCancel: cancelling the workflow stops the command's whole tree,
// setsid daemon included (checked by PID and start time), and the records
// say why. The worker logs the cancellation at INFO: no ERROR line, and no
// WARN about it (the SDK's own lines go through node.SDKLogger).
func TestCancel(t *testing.T) {
	c := newCluster(t)
	c.node("a")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "cancel"
	run := c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("setsid sleep 1000 & sleep 1000 & wait")}})
	n, rec, tree := c.liveCommand(ctx, id, 3)
	t.Logf("command %s on %s: tree %v", rec.ID, n.name, tree)
	began := time.Now()
	if err := c.c.CancelWorkflow(ctx, id, run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	res, err := result(t, ctx, c, run)
	t.Logf("cancellation to workflow end: %v", time.Since(began).Round(time.Millisecond))
	if !temporal.IsCanceledError(err) {
		t.Fatalf("workflow error %v, want cancelled", err)
	}
	for _, p := range tree {
		if p.alive() {
			t.Errorf("process %d (start %d) of the tree is still running", p.pid, p.start)
		}
	}
	if res == nil || len(res.Commands) != 1 || res.Commands[0].StopReason != hostfork.ReasonCancelled || !res.Commands[0].Final() {
		t.Fatalf("result %+v", res)
	}
	if res.Stopped == nil || res.Stopped.State != hostfork.EnvStopped {
		t.Fatalf("result's environment %+v", res.Stopped)
	}
	_, got, err := n.h.Status(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.StopReason != hostfork.ReasonCancelled || got.TreeState != hostfork.PhaseExited || !got.StoppedByHostfork {
		t.Fatalf("record: stop reason %q, tree %s, stopped by hostfork %v", got.StopReason, got.TreeState, got.StoppedByHostfork)
	}
	if left := cgroupProcs(n.cgroup); len(left) != 0 {
		t.Fatalf("processes left under %s: %v", n.cgroup, left)
	}
	checkCancelLog(t, n)
}

// checkCancelLog reads a worker's log (JSON lines) after a cancellation:
// the worker said it stopped the tree, at INFO, and nothing is at ERROR or
// a WARN about the cancellation.
func checkCancelLog(t *testing.T, n *nodeProc) {
	t.Helper()
	b, err := os.ReadFile(n.log)
	if err != nil {
		t.Fatal(err)
	}
	var said bool
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("worker log line %q: %v", line, err)
			continue
		}
		switch {
		case rec.Level == "ERROR", rec.Level == "WARN" && strings.Contains(strings.ToLower(line), "cancel"):
			t.Errorf("worker log: %s", line)
		case rec.Level == "INFO" && rec.Msg == "exec cancelled: tree stopped":
			said = true
		}
	}
	if !said {
		t.Errorf("worker log has no INFO \"exec cancelled: tree stopped\":\n%s", b)
	}
}

// TestWorkerKilled: worker a is SIGKILLed while its Exec runs. The
// workflow starts again on b and completes there; on a, the orphaned
// environment's tree is gone at once (owner exit, no reaper), and the
// restarted worker's reap records and reports the environment's stop.
func TestWorkerKilled(t *testing.T) {
	c := newCluster(t)
	a := c.node("a")
	b := c.node("b")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := b.h.SetPaused(ctx, true); err != nil { // so that Create lands on a
		t.Fatal(err)
	}
	const id = "worker-killed"
	run := c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("sleep 300 & sleep 4; echo done")}})
	n, rec, tree := c.liveCommand(ctx, id, 3)
	if n != a {
		t.Fatalf("the command runs on %s, want a", n.name)
	}
	if err := b.h.SetPaused(ctx, false); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	a.kill(t)
	// Owner exit: the guardians stop the trees when the worker's control
	// pipes close.
	for _, p := range tree {
		for p.alive() && time.Since(killed) < 10*time.Second {
			time.Sleep(10 * time.Millisecond)
		}
		if p.alive() {
			t.Fatalf("process %d of the orphaned tree still runs 10 s after its worker died", p.pid)
		}
	}
	t.Logf("orphaned tree gone %v after SIGKILL", time.Since(killed).Round(time.Millisecond))

	resumed := waitEnv(t, ctx, b, id)
	t.Logf("worker loss to the new environment on b: %v", resumed.Sub(killed).Round(time.Millisecond))
	res, err := result(t, ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Node != "b" || res.ExitStatus != 0 || len(res.Placements) != 2 || res.Placements[0].Node != "a" || res.Placements[0].Outcome != flow.OutcomeNodeLost {
		t.Fatalf("result %+v", res)
	}
	if left := cgroupProcs(a.cgroup); len(left) != 0 {
		t.Fatalf("processes left under a's cgroup parent: %v", left)
	}

	// Restart a: its reap at start records the stop and reports it.
	since, err := a.h.LastEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.start(a)
	var reaped bool
	evctx, evcancel := context.WithTimeout(ctx, 30*time.Second)
	defer evcancel()
	for ev, err := range a.h.Events(evctx, since, true) {
		if err != nil {
			t.Fatalf("no reap event for %s: %v", rec.Env, err)
		}
		if ev.Kind == hostfork.EventReap && ev.Env == rec.Env && strings.Contains(ev.Detail, "stopped: owner-exit") {
			reaped = true
			break
		}
	}
	if !reaped {
		t.Fatal("no reap event")
	}
	logb, _ := os.ReadFile(a.log)
	if !strings.Contains(string(logb), `"msg":"reap"`) || !strings.Contains(string(logb), rec.Env) {
		t.Errorf("worker a's log does not report the reap of %s", rec.Env)
	}
	env, _, err := a.h.Status(ctx, rec.Env)
	if err != nil {
		t.Fatal(err)
	}
	if env.State != hostfork.EnvStopped || env.StopReason != hostfork.ReasonOwnerExit {
		t.Fatalf("a's environment: %s, reason %q", env.State, env.StopReason)
	}
	for _, cmd := range env.Commands {
		if !cmd.Final() || cmd.StopReason != hostfork.ReasonOwnerExit {
			t.Fatalf("a's command %s: %s, reason %q", cmd.ID, cmd.State, cmd.StopReason)
		}
	}
	checkPlacement(t, &cluster{t: t, nodes: map[string]*nodeProc{"b": b}}, id, res)
}

// waitEnv waits for the workflow's first environment on n and returns
// when it was created.
func waitEnv(t *testing.T, ctx context.Context, n *nodeProc, wid string) time.Time {
	t.Helper()
	for {
		if envs := n.envsOf(t, wid); len(envs) > 0 {
			return envs[0].CreatedAt
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no environment of %s on %s", wid, n.name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestCreateRetried: the first attempt of Create makes its environment and
// then fails, its result lost. The retry returns that environment, found
// by its label on a or through the heartbeat on b, and no second one is
// made.
func TestCreateRetried(t *testing.T) {
	c := newCluster(t)
	a := c.node("a", node.FaultEnv+"=create-result-lost")
	b := c.node("b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.h.SetPaused(ctx, true); err != nil {
		t.Fatal(err)
	}
	const id = "create-retried"
	run := c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("echo ok")}})
	waitEnv(t, ctx, a, id)
	// Let the retry go to either node.
	if err := a.h.SetPaused(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := b.h.SetPaused(ctx, false); err != nil {
		t.Fatal(err)
	}
	res, err := result(t, ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Node != "a" || len(res.Placements) != 1 || !res.Placements[0].Reused || res.ExitStatus != 0 {
		t.Fatalf("result %+v", res)
	}
	if envs := b.envsOf(t, id); len(envs) != 0 {
		t.Fatalf("b made %v", envs)
	}
	checkPlacement(t, c, id, res)
	logs := c.logText()
	switch {
	case strings.Contains(logs, "environment found by label"):
		t.Log("the retry ran on a and found the environment by its label")
	case strings.Contains(logs, "environment made on another node"):
		t.Log("the retry ran on b and returned a's environment from the heartbeat")
	default:
		t.Error("no worker logged how the retry found the environment")
	}
}

// TestServerRestart: the Temporal server is restarted (same database file,
// same port) while a command runs, and stays away for 3 s, longer than a
// heartbeat's RPC deadline (so the running Exec attempt loses its server);
// the workflow resumes and completes, the command is not run twice, and
// nothing is left running or active on either node.
func TestServerRestart(t *testing.T) {
	c := newCluster(t)
	c.node("a")
	c.node("b")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const id = "server-restart"
	run := c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("sleep 6; echo done"), sh("echo second")}})
	n, rec, _ := c.liveCommand(ctx, id, 2)
	t.Logf("command %s on %s; restarting the server", rec.ID, n.name)
	away := c.restartServer(3 * time.Second)
	t.Logf("server away for %v", away.Round(time.Millisecond))
	res, err := result(t, ctx, c, run)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 0 || len(res.Commands) != 2 {
		t.Fatalf("result %+v", res)
	}
	logs := c.logText()
	lost, reattached := strings.Count(logs, "exec attempt lost"), strings.Count(logs, "exec retried: reattached")
	t.Logf("placements %+v; Exec attempts that lost the server: %d, reattached: %d", res.Placements, lost, reattached)
	if len(res.Placements) == 1 && lost > 0 && reattached == 0 {
		t.Errorf("an Exec attempt was lost but no retry reattached")
	}
	if starts := strings.Count(logs, `"msg":"exec started"`); starts != 2*len(res.Placements) {
		t.Errorf("%d commands started for 2 commands in %d placements", starts, len(res.Placements))
	}
	for _, nd := range c.nodes {
		active, err := nd.h.Envs(ctx, hostfork.EnvFilter{Active: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(active) != 0 {
			t.Errorf("node %s: environments still active: %v", nd.name, active)
		}
		if left := cgroupProcs(nd.cgroup); len(left) != 0 {
			t.Errorf("node %s: processes left: %v", nd.name, left)
		}
	}
	if len(res.Placements) == 1 {
		checkPlacement(t, c, id, res)
	}
}
