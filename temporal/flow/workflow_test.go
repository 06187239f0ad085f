package flow_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// fakeNodes stands in for the node workers: Create places on the next node
// of a list; exec decides what each Exec does. It records every call with
// the task queue it was sent to.
type fakeNodes struct {
	mu     sync.Mutex
	nodes  []string
	placed int
	calls  []string // "Activity@queue"
	exec   func(ctx context.Context, queue string, req flow.ExecRequest) (*flow.ExecResult, error)
	// startToClose of each Exec attempt, as the activity saw it.
	execDeadlines []time.Time
	// stopCommands are the commands in Stop's record.
	stopCommands []api.Command
}

func (f *fakeNodes) record(ctx context.Context, name string) string {
	q := activity.GetInfo(ctx).TaskQueue
	f.mu.Lock()
	f.calls = append(f.calls, name+"@"+q)
	f.mu.Unlock()
	return q
}

func (f *fakeNodes) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterWorkflowWithOptions(flow.RunInEnvironment, workflow.RegisterOptions{Name: flow.WorkflowRunInEnvironment})
	env.RegisterActivityWithOptions(func(ctx context.Context, req flow.CreateRequest) (*flow.CreateResult, error) {
		f.record(ctx, flow.ActivityCreate)
		f.mu.Lock()
		node := f.nodes[f.placed%len(f.nodes)]
		f.placed++
		n := f.placed
		f.mu.Unlock()
		return &flow.CreateResult{Node: node, Env: node + "-env" + string(rune('0'+n)), DeadlineAt: time.Now().Add(time.Hour)}, nil
	}, activity.RegisterOptions{Name: flow.ActivityCreate})
	env.RegisterActivityWithOptions(func(ctx context.Context, req flow.ExecRequest) (*flow.ExecResult, error) {
		q := f.record(ctx, flow.ActivityExec)
		dl := activity.GetInfo(ctx).Deadline
		f.mu.Lock()
		f.execDeadlines = append(f.execDeadlines, dl)
		f.mu.Unlock()
		return f.exec(ctx, q, req)
	}, activity.RegisterOptions{Name: flow.ActivityExec})
	env.RegisterActivityWithOptions(func(ctx context.Context, req flow.StopRequest) (*api.Env, error) {
		f.record(ctx, flow.ActivityStop)
		e := &api.Env{ID: req.Env, State: api.EnvStopped, StopReason: req.Reason}
		f.mu.Lock()
		e.Commands = f.stopCommands
		f.mu.Unlock()
		return e, nil
	}, activity.RegisterOptions{Name: flow.ActivityStop})
	env.RegisterActivityWithOptions(func(ctx context.Context, req flow.ExportRequest) (*api.ExportResult, error) {
		f.record(ctx, flow.ActivityExport)
		return &api.ExportResult{Env: req.Env, Tree: req.Tree, Dest: req.Dest, Label: api.ExportComplete}, nil
	}, activity.RegisterOptions{Name: flow.ActivityExport})
}

func exited(code int, argv []string) *flow.ExecResult {
	return &flow.ExecResult{Record: api.Command{ID: strings.Join(argv, "_"), State: api.CommandExited, ExitCode: &code, Argv: argv}}
}

func request(cmds ...[]string) flow.Request {
	r := flow.Request{}
	for _, c := range cmds {
		r.Commands = append(r.Commands, flow.Command{Argv: c})
	}
	return r
}

func run(t *testing.T, f *fakeNodes, req flow.Request, setup func(*testsuite.TestWorkflowEnvironment)) (*flow.Result, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	f.register(env)
	if setup != nil {
		setup(env)
	}
	env.ExecuteWorkflow(flow.WorkflowRunInEnvironment, req)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res flow.Result
	err := env.GetWorkflowResult(&res)
	if err != nil {
		var ce *temporal.CanceledError
		var ae *temporal.ApplicationError
		switch {
		case errors.As(err, &ce) && ce.HasDetails():
			_ = ce.Details(&res)
		case errors.As(err, &ae) && ae.HasDetails():
			_ = ae.Details(&res)
		}
	}
	return &res, err
}

func TestRunCompletes(t *testing.T) {
	f := &fakeNodes{nodes: []string{"a"}, exec: func(_ context.Context, _ string, req flow.ExecRequest) (*flow.ExecResult, error) {
		return exited(0, req.Command.Argv), nil
	}}
	req := request([]string{"make"}, []string{"make", "test"})
	req.Export = map[string]string{"src": "/out/src", "build": "/out/build"}
	res, err := run(t, f, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Create@hostfork", "Exec@hostfork-node-a", "Exec@hostfork-node-a", "Stop@hostfork-node-a",
		"Export@hostfork-node-a", "Export@hostfork-node-a"}
	if strings.Join(f.calls, " ") != strings.Join(want, " ") {
		t.Fatalf("calls %v, want %v", f.calls, want)
	}
	if res.Node != "a" || len(res.Commands) != 2 || res.ExitStatus != 0 || len(res.Exports) != 2 || res.Exports[0].Tree != "build" {
		t.Fatalf("result %+v", res)
	}
	if res.Stopped == nil || res.Stopped.StopReason != api.ReasonCompleted || len(res.Placements) != 1 || res.Placements[0].Outcome != flow.OutcomeCompleted {
		t.Fatalf("result %+v", res)
	}
}

func TestRunStopsAtFailingCommand(t *testing.T) {
	f := &fakeNodes{nodes: []string{"a"}, exec: func(_ context.Context, _ string, req flow.ExecRequest) (*flow.ExecResult, error) {
		return exited(3, req.Command.Argv), nil
	}}
	res, err := run(t, f, request([]string{"false"}, []string{"never"}), nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != flow.ErrCommandFailed || !ae.NonRetryable() {
		t.Fatalf("workflow error %v, want a non-retryable %s", err, flow.ErrCommandFailed)
	}
	if !strings.Contains(ae.Error(), `command 1 of 2 ["false"] exited with status 3`) {
		t.Fatalf("message %q", ae.Error())
	}
	if len(res.Commands) != 1 || res.ExitStatus != 3 || res.Stopped == nil || res.Placements[0].Outcome != flow.OutcomeCompleted {
		t.Fatalf("result %+v", res)
	}
}

// TestRunNodeLost: the first node's Exec times out (its retry was not
// picked up), so the workflow starts again from Create, on the next node,
// and asks the lost node to stop its environment.
func TestRunNodeLost(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"schedule-to-start", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, temporal.NewHeartbeatTimeoutError())},
		{"environment-lost", temporal.NewNonRetryableApplicationError("owner exited", flow.ErrEnvLost, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeNodes{nodes: []string{"a", "b"}, exec: func(_ context.Context, q string, req flow.ExecRequest) (*flow.ExecResult, error) {
				if q == flow.NodeQueue("a") {
					return nil, tt.err
				}
				return exited(0, req.Command.Argv), nil
			}}
			res, err := run(t, f, request([]string{"true"}), nil)
			if err != nil {
				t.Fatal(err)
			}
			// The lost node's stop and the new Create are scheduled
			// together: their order is not fixed.
			want := []string{"Create@hostfork", "Create@hostfork", "Exec@hostfork-node-a", "Exec@hostfork-node-b",
				"Stop@hostfork-node-a", "Stop@hostfork-node-b"}
			got := slices.Sorted(slices.Values(f.calls))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("calls %v, want %v", f.calls, want)
			}
			if res.Node != "b" || len(res.Placements) != 2 || res.Placements[0].Outcome != flow.OutcomeNodeLost ||
				!strings.Contains(res.Placements[0].Cleanup, "stopped by its node") || len(res.Commands) != 1 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestRunGivesUp(t *testing.T) {
	f := &fakeNodes{nodes: []string{"a", "b"}, exec: func(context.Context, string, flow.ExecRequest) (*flow.ExecResult, error) {
		return nil, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
	}}
	req := request([]string{"true"})
	req.Options.MaxPlacements = 2
	res, err := run(t, f, req, nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != flow.ErrRunFailed {
		t.Fatalf("error %v", err)
	}
	if len(res.Placements) != 2 {
		t.Fatalf("result %+v", res)
	}
}

func TestRunInvalid(t *testing.T) {
	f := &fakeNodes{nodes: []string{"a"}}
	_, err := run(t, f, flow.Request{}, nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != flow.ErrInvalid {
		t.Fatalf("error %v", err)
	}
}

// TestRunCancelled: cancelling the workflow cancels Exec, whose final
// record comes back as the CanceledError's details, then stops the
// environment.
func TestRunCancelled(t *testing.T) {
	// The SDK's test environment resolves a cancelled activity at once,
	// without the details a real server carries back (the end-to-end test
	// checks those), so the record comes from the stop.
	f := &fakeNodes{nodes: []string{"a"}}
	f.exec = func(ctx context.Context, _ string, req flow.ExecRequest) (*flow.ExecResult, error) {
		r := exited(143, req.Command.Argv)
		r.Record.StopReason = api.ReasonCancelled
		f.mu.Lock()
		f.stopCommands = []api.Command{r.Record}
		f.mu.Unlock()
		<-ctx.Done()
		return nil, temporal.NewCanceledError(*r)
	}
	res, err := run(t, f, request([]string{"sleep", "1000"}), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	})
	if !temporal.IsCanceledError(err) {
		t.Fatalf("error %v, want cancelled", err)
	}
	if len(res.Commands) != 1 || res.Commands[0].StopReason != api.ReasonCancelled || res.Stopped == nil || res.Stopped.StopReason != api.ReasonCancelled {
		t.Fatalf("result %+v", res)
	}
	if last := f.calls[len(f.calls)-1]; last != "Stop@hostfork-node-a" {
		t.Fatalf("calls %v", f.calls)
	}
}

// TestExecDeadline: Exec's start-to-close timeout is the time left to the
// environment's deadline.
func TestExecDeadline(t *testing.T) {
	f := &fakeNodes{nodes: []string{"a"}, exec: func(_ context.Context, _ string, req flow.ExecRequest) (*flow.ExecResult, error) {
		return exited(0, req.Command.Argv), nil
	}}
	began := time.Now()
	if _, err := run(t, f, request([]string{"true"}), nil); err != nil {
		t.Fatal(err)
	}
	if len(f.execDeadlines) != 1 || f.execDeadlines[0].After(began.Add(time.Hour+time.Minute)) {
		t.Fatalf("exec deadline %v, want within the environment's hour", f.execDeadlines)
	}
}

func TestNodeLost(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{temporal.NewHeartbeatTimeoutError(), true},
		{temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true},
		{temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil), false},
		{temporal.NewNonRetryableApplicationError("x", flow.ErrEnvLost, nil), true},
		{temporal.NewApplicationError("x", flow.ErrHostfork), false},
		{errors.New("x"), false},
	} {
		if got := flow.NodeLost(tt.err); got != tt.want {
			t.Errorf("NodeLost(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
