package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// HeartbeatInterval is how often the activities record a heartbeat; the
// worker sends them to the server at most this often
// (worker.Options.MaxHeartbeatThrottleInterval), so a cancellation reaches a
// running command within about this long.
const HeartbeatInterval = 2 * time.Second

// FaultEnv arms a test-only fault: with the value "create-result-lost", the
// first attempt of each Create that makes an environment on this worker
// records it in its heartbeat and then fails, as if its result were lost.
// Unset, it costs a map lookup.
const FaultEnv = "HOSTFORK_TEMPORAL_FAULT"

const faultCreateResultLost = "create-result-lost"

// Activities are the activities of package flow, served by one node over
// its hostfork store. Register them with Register.
type Activities struct {
	h          *hostfork.Host
	node       string
	defaultTTL time.Duration
	maxTTL     time.Duration
	log        *slog.Logger
	fault      string
	faulted    sync.Map // Create keys the fault has fired for
}

// attemptKey names an activity across its attempts: the workflow run and
// the activity id. It is the value of the labels LabelCreate and LabelExec.
func attemptKey(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return info.WorkflowExecution.RunID + "/" + info.ActivityID
}

// heartbeat records details() every HeartbeatInterval (first at once) until
// the returned stop is called or ctx ends.
func heartbeat(ctx context.Context, details func() any) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(HeartbeatInterval / 2)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, details())
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// Create makes an environment on this node from the spec, owned by the
// worker process with owner-exit stop and a bounded ttl. A retried attempt
// returns the environment an earlier attempt made: named in the earlier
// attempt's heartbeat (when it ran on another node), or found here by its
// LabelCreate label; never a second one.
func (a *Activities) Create(ctx context.Context, req flow.CreateRequest) (*flow.CreateResult, error) {
	key := attemptKey(ctx)
	if res, err := a.earlierCreate(ctx, key); res != nil || err != nil {
		return res, err
	}
	paused, err := a.h.Paused(ctx)
	if err != nil {
		return nil, appError(err)
	}
	if paused {
		// The task was polled before the pause: give it back.
		return nil, temporal.NewApplicationError("node "+a.node+" is paused (hostfork pause); another node will take it", flow.ErrNodeRefused)
	}
	s := req.Spec
	l := &s.Lifetime
	switch {
	case l.OwnerExit != "" && l.OwnerExit != api.OwnerExitStop:
		return nil, invalid(fmt.Sprintf("owner_exit %q: an environment made by a Temporal worker stops with its worker; use stop or leave it out", l.OwnerExit))
	case l.UntilStopped:
		return nil, invalid(fmt.Sprintf("until_stopped: an environment made by a Temporal worker needs a deadline; give max_runtime (at most %v)", a.maxTTL))
	case l.MaxRuntime.D() > a.maxTTL:
		return nil, invalid(fmt.Sprintf("max_runtime %v is longer than this node's limit %v (hostfork-temporal worker --max-ttl)", l.MaxRuntime.D(), a.maxTTL))
	case l.MaxRuntime == 0:
		l.MaxRuntime = api.Duration(a.defaultTTL)
	}
	l.OwnerExit = api.OwnerExitStop
	labels := make(map[string]string, len(s.Labels)+3)
	maps.Copy(labels, s.Labels)
	labels[flow.LabelCreate] = key
	labels[flow.LabelWorkflow] = activity.GetInfo(ctx).WorkflowExecution.ID
	labels[flow.LabelNode] = a.node
	s.Labels = labels

	plan, err := a.h.Plan(ctx, s)
	if err != nil {
		return nil, appError(err)
	}
	if len(plan.Unsupported) > 0 {
		return nil, invalid("node " + a.node + " can't make this environment: " + strings.Join(plan.Unsupported, "; "))
	}
	stop := heartbeat(ctx, func() any { return flow.CreateProgress{} })
	// Creation is not interrupted by cancellation: it is short and leaves
	// a record the workflow then stops, instead of half-made state.
	env, err := a.h.Create(context.WithoutCancel(ctx), plan)
	stop()
	if err != nil {
		return nil, appError(err)
	}
	rec := env.Record()
	res := &flow.CreateResult{Node: a.node, Env: rec.ID, Record: rec}
	if rec.DeadlineAt != nil {
		res.DeadlineAt = *rec.DeadlineAt
	}
	activity.RecordHeartbeat(ctx, flow.CreateProgress{Node: a.node, Env: rec.ID, DeadlineAt: res.DeadlineAt})
	a.log.Info("created", "env", rec.ID, "create", key, "deadline", res.DeadlineAt)
	if _, done := a.faulted.LoadOrStore(key, true); a.fault == faultCreateResultLost && !done {
		return nil, temporal.NewApplicationError("fault "+faultCreateResultLost+": environment "+rec.ID+" made, result dropped", flow.ErrHostfork)
	}
	return res, nil
}

// earlierCreate returns the environment an earlier attempt of this Create
// made, if there is one that is still usable.
func (a *Activities) earlierCreate(ctx context.Context, key string) (*flow.CreateResult, error) {
	var p flow.CreateProgress
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &p) == nil && p.Env != "" && p.Node != a.node {
		// Made on another node: only that node can see it. If that node
		// is gone, the workflow's next step there times out and the
		// workflow starts again from a new Create.
		a.log.Info("create retried: environment made on another node", "env", p.Env, "node", p.Node, "create", key)
		return &flow.CreateResult{Node: p.Node, Env: p.Env, DeadlineAt: p.DeadlineAt, Reused: true, FoundBy: "heartbeat"}, nil
	}
	envs, err := a.h.Envs(ctx, hostfork.EnvFilter{Labels: hostfork.Selector{flow.LabelCreate + "=" + key}})
	if err != nil {
		return nil, appError(err)
	}
	for i := len(envs) - 1; i >= 0; i-- {
		rec := envs[i]
		if rec.State != hostfork.EnvActive || rec.Due != "" || rec.OwnerAlive != "alive" {
			// Stopped, or owned by an earlier worker process that exited
			// (so it is stopping): not usable.
			continue
		}
		res := &flow.CreateResult{Node: a.node, Env: rec.ID, Record: rec, Reused: true, FoundBy: "label"}
		if rec.DeadlineAt != nil {
			res.DeadlineAt = *rec.DeadlineAt
		}
		a.log.Info("create retried: environment found by label", "env", rec.ID, "create", key)
		return res, nil
	}
	return nil, nil
}

// Exec starts a command in the environment and waits for its leader, then
// stops what the leader left behind (reason "completed", as `hostfork run`
// does) and returns the final record. It heartbeats the leader's state and
// the output artifacts' sizes. The command is an agent workload (it holds
// an admission slot while it runs; it was admitted with its environment,
// so it does not queue) with owner-exit stop: if the worker dies, the
// command's guardian stops its tree when its control pipe closes.
//
// Cancellation of the activity by the workflow stops the whole tree
// (reason "cancelled") and returns a temporal.CanceledError whose details
// are the final ExecResult. Any other end of the activity's context (the
// server timed the attempt out or could not be reached) leaves the command
// running: the retry, on this node's queue, reattaches to it by its
// LabelExec label.
func (a *Activities) Exec(ctx context.Context, req flow.ExecRequest) (*flow.ExecResult, error) {
	if len(req.Command.Argv) == 0 {
		return nil, invalid("Exec: the command has no argv")
	}
	key := attemptKey(ctx)
	// Heartbeat from the start: an attempt that can't heartbeat is timed
	// out by the server, and its context then ends here too.
	var mu sync.Mutex
	var started *hostfork.Command
	stop := heartbeat(ctx, func() any {
		mu.Lock()
		c := started
		mu.Unlock()
		if c == nil {
			return flow.ExecProgress{}
		}
		return progress(c.Record())
	})
	defer stop()
	cmd, reattached, err := a.startOrReattach(ctx, req, key)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	started = cmd
	mu.Unlock()
	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait() // ends our wait only; the tree is unaffected
	leader := make(chan error, 1)
	go func() {
		_, err := cmd.Wait(waitCtx)
		leader <- err
	}()
	select {
	case err := <-leader:
		stop()
		if err != nil {
			return nil, appError(err)
		}
		// What the leader left behind is stopped, as `hostfork run` does;
		// with nothing left this only confirms the tree's exit.
		rec, err := cmd.StopTree(context.WithoutCancel(ctx), hostfork.StopOptions{Reason: hostfork.ReasonCompleted})
		if err != nil {
			return nil, appError(err)
		}
		return a.execResult(ctx, rec, reattached), nil
	case <-ctx.Done():
		stop()
		cause := context.Cause(ctx)
		var ce *temporal.CanceledError
		if !errors.As(cause, &ce) {
			a.log.Warn("exec attempt lost; the command keeps running for the retry", "command", cmd.ID(), "cause", cause)
			return nil, temporal.NewApplicationError(fmt.Sprintf("Exec attempt ended (%v); command %s keeps running for the next attempt", cause, cmd.ID()), flow.ErrAttemptLost)
		}
		rec, err := cmd.StopTree(context.WithoutCancel(ctx), hostfork.StopOptions{Reason: hostfork.ReasonCancelled})
		a.log.Info("exec cancelled: tree stopped", "command", rec.ID, "stop_reason", rec.StopReason, "error", err)
		if err != nil && rec.ID == "" {
			return nil, appError(err)
		}
		return nil, temporal.NewCanceledError(*a.execResult(ctx, rec, reattached))
	}
}

// startOrReattach returns the command an earlier attempt of this Exec
// started, else starts it.
func (a *Activities) startOrReattach(ctx context.Context, req flow.ExecRequest, key string) (*hostfork.Command, bool, error) {
	recs, err := a.h.Commands(ctx, hostfork.CommandFilter{Env: req.Env, Labels: hostfork.Selector{flow.LabelExec + "=" + key}})
	if err != nil {
		return nil, false, appError(err)
	}
	if len(recs) > 0 {
		rec := recs[len(recs)-1]
		if rec.StopReason == hostfork.ReasonOwnerExit {
			return nil, false, envLost(fmt.Sprintf("command %s was stopped when the worker process that started it exited", rec.ID))
		}
		cmd, err := a.h.OpenCommand(ctx, rec.ID)
		if err != nil {
			return nil, false, appError(err)
		}
		a.log.Info("exec retried: reattached", "command", rec.ID, "exec", key)
		return cmd, true, nil
	}
	env, err := a.h.OpenEnv(ctx, req.Env)
	if errors.Is(err, hostfork.ErrNotFound) {
		return nil, false, envLost(fmt.Sprintf("environment %s is not on node %s", req.Env, a.node))
	}
	if err != nil {
		return nil, false, appError(err)
	}
	erec := env.Record()
	switch {
	case erec.State != hostfork.EnvActive:
		return nil, false, envLost(fmt.Sprintf("environment %s is %s (%s)", erec.ID, erec.State, erec.StopReason))
	case erec.Due != "":
		return nil, false, envLost(fmt.Sprintf("environment %s is ending: %s", erec.ID, erec.Due))
	case erec.OwnerAlive != "alive":
		return nil, false, envLost(fmt.Sprintf("environment %s: its owner, an earlier worker process, is %s", erec.ID, erec.OwnerAlive))
	}
	c := req.Command
	cmd := env.Command(c.Argv...)
	cmd.Cwd, cmd.EnvPolicy, cmd.EnvSet, cmd.Purpose = c.Cwd, c.EnvPolicy, c.EnvSet, c.Purpose
	cmd.Labels = make(map[string]string, len(c.Labels)+1)
	maps.Copy(cmd.Labels, c.Labels)
	cmd.Labels[flow.LabelExec] = key
	cmd.Timeout = c.Timeout.D()
	cmd.Output = hostfork.OutputFiles
	// Owner-exit stop: a dead worker's commands end on their own (an
	// environment without a view has no keeper to do it).
	cmd.OwnerExit = hostfork.OwnerExitStop
	// Admission happened once for the environment, when this node's slot
	// supplier took its Create; its commands are agent workloads (so they
	// hold their slot in hostfork's capacity) that don't queue again, also
	// not behind a later pause.
	cmd.Workload, cmd.Admit = hostfork.WorkloadAgent, hostfork.AdmitSkip

	// Start's context stops the tree when it ends (as exec.CommandContext
	// does), so it must not be the activity's, which also ends when an
	// attempt is lost. It only aborts Start itself.
	startCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	unwatch := context.AfterFunc(ctx, abort)
	err = cmd.Start(startCtx)
	unwatch()
	if err != nil {
		abort()
		return nil, false, appError(err)
	}
	a.log.Info("exec started", "command", cmd.ID(), "env", req.Env, "exec", key)
	return cmd, false, nil
}

func size(path string) int64 {
	if path == "" {
		return 0
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func progress(rec hostfork.CommandRecord) flow.ExecProgress {
	p := flow.ExecProgress{Command: rec.ID, LeaderState: rec.LeaderState, TreeState: rec.TreeState,
		StdoutBytes: size(rec.StdoutPath), StderrBytes: size(rec.StderrPath)}
	if rec.PID != nil {
		p.PID = *rec.PID
	}
	return p
}

// execResult is the command's final record as a reader sees it (with the
// computed fields a live handle's record lacks).
func (a *Activities) execResult(ctx context.Context, rec hostfork.CommandRecord, reattached bool) *flow.ExecResult {
	if rec.ID != "" {
		if _, c, err := a.h.Status(context.WithoutCancel(ctx), rec.ID); err == nil && c != nil {
			rec = *c
		}
	}
	return &flow.ExecResult{Record: rec, Reattached: reattached, StdoutBytes: size(rec.StdoutPath), StderrBytes: size(rec.StderrPath)}
}

// Stop stops an environment of this node and returns its final record,
// with its commands. Stopping a stopped environment returns its record.
func (a *Activities) Stop(ctx context.Context, req flow.StopRequest) (*api.Env, error) {
	stop := heartbeat(ctx, func() any { return nil })
	defer stop()
	_, err := a.h.StopEnv(ctx, req.Env, hostfork.StopOptions{Reason: req.Reason, Grace: req.Grace.D()})
	if err != nil {
		return nil, appError(err)
	}
	env, _, err := a.h.Status(ctx, req.Env)
	if err != nil {
		return nil, appError(err)
	}
	a.log.Info("stopped", "env", env.ID, "state", env.State, "stop_reason", env.StopReason)
	return env, nil
}

// Export copies one of an environment's trees to a path on this node.
func (a *Activities) Export(ctx context.Context, req flow.ExportRequest) (*api.ExportResult, error) {
	var mu sync.Mutex
	var files, total int64
	stop := heartbeat(ctx, func() any {
		mu.Lock()
		defer mu.Unlock()
		return [2]int64{files, total}
	})
	defer stop()
	res, err := a.h.Export(ctx, req.Env, req.Tree, req.Dest, hostfork.ExportOptions{Progress: func(f, t int64) {
		mu.Lock()
		files, total = f, t
		mu.Unlock()
	}})
	if err != nil {
		return nil, appError(err)
	}
	return res, nil
}

// Status returns the record of an environment (with its commands) or a
// command of this node.
func (a *Activities) Status(ctx context.Context, req flow.StatusRequest) (*flow.StatusResult, error) {
	env, cmd, err := a.h.Status(ctx, req.ID)
	if err != nil {
		return nil, appError(err)
	}
	return &flow.StatusResult{Env: env, Command: cmd}, nil
}

// Logs returns a byte range of a command's output artifact.
func (a *Activities) Logs(ctx context.Context, req flow.LogsRequest) (*flow.LogsResult, error) {
	limit := req.Limit
	if limit <= 0 || limit > flow.MaxLogChunk {
		limit = flow.MaxLogChunk
	}
	cmd, err := a.h.OpenCommand(ctx, req.Command)
	if err != nil {
		return nil, appError(err)
	}
	// Read the record first: if the tree was already gone, everything it
	// wrote is in the file, so a short read is the end of the stream.
	rec := cmd.Record()
	done := rec.Final() || rec.State == hostfork.CommandUnverified
	r, err := cmd.Logs(ctx, hostfork.LogOptions{Stream: req.Stream, Offset: req.Offset})
	if err != nil {
		return nil, appError(err)
	}
	defer r.Close()
	buf := make([]byte, limit)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, appError(err)
	}
	return &flow.LogsResult{Data: buf[:n], Offset: req.Offset, Next: req.Offset + int64(n), EOF: done && int64(n) < limit}, nil
}
