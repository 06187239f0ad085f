package flow

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
)

// Request is RunInEnvironment's input: the environment, the commands to run
// in it one after another, and the trees to export at the end.
type Request struct {
	Spec     spec.Environment `json:"spec"`
	Commands []Command        `json:"commands"`
	// Export maps a tree name to a destination path on the node that ran
	// the commands. It is copied after the environment's stop, so the
	// copy is labelled complete (a copy of a running environment is
	// live/inconsistent); a stop deletes no file.
	Export  map[string]string `json:"export,omitempty"`
	Options Options           `json:"options"`
}

// Options tune how a lost node is detected. Zero values take the defaults.
type Options struct {
	// HeartbeatTimeout: an activity on a node that has not heartbeated for
	// this long is timed out (default DefaultHeartbeatTimeout).
	HeartbeatTimeout api.Duration `json:"heartbeat_timeout,omitempty"`
	// NodePickup is the schedule-to-start timeout on a node's queue: a
	// task no worker of that node takes within it means the node is gone
	// (default DefaultNodePickup).
	NodePickup api.Duration `json:"node_pickup,omitempty"`
	// MaxPlacements bounds how many environments the workflow makes
	// before it gives up (default DefaultMaxPlacements).
	MaxPlacements int `json:"max_placements,omitempty"`
}

// Defaults of Options (docs/temporal.md, "Choosing the heartbeat timeout").
// Workers send a heartbeat at least every 2 s (node.HeartbeatInterval), so
// 10 s tolerates four lost heartbeats, a long GC pause or a short server
// restart, and a dead node is noticed within HeartbeatTimeout + NodePickup
// (about 21 s with the retry's backoff). The environment on a dead node does
// not wait for this: owner-exit stops it at once.
const (
	DefaultHeartbeatTimeout = 10 * time.Second
	DefaultNodePickup       = 10 * time.Second
	DefaultMaxPlacements    = 3
)

func (o Options) withDefaults() Options {
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = api.Duration(DefaultHeartbeatTimeout)
	}
	if o.NodePickup <= 0 {
		o.NodePickup = api.Duration(DefaultNodePickup)
	}
	if o.MaxPlacements <= 0 {
		o.MaxPlacements = DefaultMaxPlacements
	}
	return o
}

// Placement outcomes.
const (
	OutcomeCompleted = "completed"
	OutcomeNodeLost  = "node-lost"
	OutcomeCancelled = "cancelled"
	OutcomeFailed    = "failed"
)

// Placement is one environment the workflow made.
type Placement struct {
	Node    string `json:"node"`
	Env     string `json:"env"`
	Reused  bool   `json:"reused,omitempty"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Cleanup says what became of a lost placement's environment.
	Cleanup string `json:"cleanup,omitempty"`
}

// Result is RunInEnvironment's output. On cancellation or failure it is
// the details of the returned temporal.CanceledError or ApplicationError.
type Result struct {
	// Node and Env are the last placement's.
	Node string `json:"node"`
	Env  string `json:"env"`
	// Commands are the final records of the commands run in that
	// environment, in order; the run stops after the first command whose
	// exit status is not 0.
	Commands []api.Command `json:"commands"`
	// ExitStatus is the last command's shell-style status (-1: unknown).
	ExitStatus int `json:"exit_status"`
	// Stopped is the environment's record after its stop.
	Stopped    *api.Env           `json:"stopped,omitempty"`
	Exports    []api.ExportResult `json:"exports,omitempty"`
	Placements []Placement        `json:"placements"`
}

// RunInEnvironment runs req.Commands in one environment: Create on the
// shared queue (any node with a free admission slot), then each command, the
// environment's stop and the exports on that node's queue. When the node is
// lost (a heartbeat timeout, or a node-queue task that no worker picks up),
// it starts again from Create, so on another node if that one is gone; the
// lost environment stops by itself (its owner, the dead worker, exited) and
// the workflow also asks its node to stop it in case the node is alive.
// Cancelling the workflow stops the running command's whole tree and the
// environment, and returns a CanceledError whose details are the Result. A
// last command whose exit status is not 0 fails the workflow with a
// non-retryable ApplicationError of type ErrCommandFailed, whose details are
// the Result too.
func RunInEnvironment(ctx workflow.Context, req Request) (*Result, error) {
	if len(req.Commands) == 0 {
		return nil, temporal.NewNonRetryableApplicationError("RunInEnvironment needs at least one command", ErrInvalid, nil)
	}
	for i, c := range req.Commands {
		if len(c.Argv) == 0 {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("command %d has no argv", i), ErrInvalid, nil)
		}
	}
	r := &runner{ctx: ctx, req: req, o: req.Options.withDefaults(), res: &Result{ExitStatus: -1, Placements: []Placement{}}}
	return r.run()
}

type runner struct {
	ctx      workflow.Context
	req      Request
	o        Options
	res      *Result
	cleanups []cleanup
}

// cleanup is the stop of a lost placement's environment, still pending.
type cleanup struct {
	placement int
	f         workflow.Future
}

func (r *runner) run() (*Result, error) {
	for n := 1; ; n++ {
		placed, err := r.create()
		if err != nil {
			if r.ctx.Err() != nil {
				return r.finish(r.cancelled)
			}
			return r.finish(r.failed("creating the environment: "+err.Error(), err))
		}
		r.res.Placements = append(r.res.Placements, Placement{Node: placed.Node, Env: placed.Env, Reused: placed.Reused})
		idx := len(r.res.Placements) - 1
		r.res.Node, r.res.Env = placed.Node, placed.Env
		r.res.Commands, r.res.Exports, r.res.Stopped, r.res.ExitStatus = []api.Command{}, nil, nil, -1

		outcome, err := r.onNode(placed)
		r.res.Placements[idx].Outcome = outcome
		if err != nil {
			r.res.Placements[idx].Error = err.Error()
		}
		switch outcome {
		case OutcomeCompleted:
			if r.res.ExitStatus != 0 {
				return r.finish(r.commandFailed)
			}
			return r.finish(nil)
		case OutcomeCancelled:
			return r.finish(r.cancelled)
		case OutcomeNodeLost:
			r.abandon(placed, idx)
			if n >= r.o.MaxPlacements {
				return r.finish(r.failed(fmt.Sprintf("gave up after %d placements, each on a node that was lost", n), err))
			}
			workflow.GetLogger(r.ctx).Warn("node lost; starting again from Create", "node", placed.Node, "env", placed.Env, "error", err)
		default:
			return r.finish(r.failed(err.Error(), err))
		}
	}
}

// ErrRunFailed is the type of the ApplicationError RunInEnvironment fails
// with; its details are the Result.
const ErrRunFailed = "RunFailed"

// ErrCommandFailed is the type of the ApplicationError RunInEnvironment
// fails with when everything ran but the last command's exit status is not
// 0 (or is unknown): the workflow shows as Failed, not Completed, and its
// details are the same Result a success returns (decision 105).
const ErrCommandFailed = "CommandFailed"

// cancelled, commandFailed and failed build the workflow's error once the
// result is final: its details are the Result.
func (r *runner) cancelled() error { return temporal.NewCanceledError(*r.res) }

func (r *runner) commandFailed() error {
	msg := "no command record came back: exit status unknown"
	if n := len(r.res.Commands); n > 0 {
		last := r.res.Commands[n-1]
		status := "unknown"
		if r.res.ExitStatus >= 0 {
			status = fmt.Sprint(r.res.ExitStatus)
		}
		msg = fmt.Sprintf("command %d of %d %q exited with status %s (state %s", n, len(r.req.Commands), last.Argv, status, last.State)
		if last.StopReason != "" {
			msg += ", stop reason " + string(last.StopReason)
		}
		msg += ")"
	}
	return temporal.NewNonRetryableApplicationError(msg, ErrCommandFailed, nil, *r.res)
}

func (r *runner) failed(msg string, cause error) func() error {
	return func() error { return temporal.NewNonRetryableApplicationError(msg, ErrRunFailed, cause, *r.res) }
}

// finish waits for the pending cleanups, then returns the result, or the
// error mkErr builds (nil: success).
func (r *runner) finish(mkErr func() error) (*Result, error) {
	dctx, cancel := workflow.NewDisconnectedContext(r.ctx)
	defer cancel()
	for _, c := range r.cleanups {
		var env api.Env
		if cerr := c.f.Get(dctx, &env); cerr != nil {
			r.res.Placements[c.placement].Cleanup = "its node did not answer (" + cerr.Error() + "); the environment stopped with its worker (owner exit)"
		} else {
			r.res.Placements[c.placement].Cleanup = fmt.Sprintf("stopped by its node (state %s, reason %s)", env.State, env.StopReason)
		}
	}
	if r.res.Stopped != nil {
		// Its commands are in Commands already.
		stopped := *r.res.Stopped
		stopped.Commands = nil
		r.res.Stopped = &stopped
	}
	if mkErr != nil {
		return nil, mkErr()
	}
	return r.res, nil
}

func (r *runner) create() (*CreateResult, error) {
	actx := workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		TaskQueue: SharedQueue,
		// No schedule-to-start timeout: waiting in the shared queue until
		// some node has a free slot is how placement queues work.
		StartToCloseTimeout: 30 * time.Minute, // trees may be large copies
		HeartbeatTimeout:    r.o.HeartbeatTimeout.D(),
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{ErrInvalid},
		},
	})
	var out CreateResult
	if err := workflow.ExecuteActivity(actx, ActivityCreate, CreateRequest{Spec: r.req.Spec}).Get(r.ctx, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// nodeOptions are the options of an activity on the placement's node.
func (r *runner) nodeOptions(ctx workflow.Context, placed *CreateResult, startToClose time.Duration, attempts int32) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              NodeQueue(placed.Node),
		ScheduleToStartTimeout: r.o.NodePickup.D(),
		StartToCloseTimeout:    startToClose,
		HeartbeatTimeout:       r.o.HeartbeatTimeout.D(),
		WaitForCancellation:    true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        5 * time.Second,
			MaximumAttempts:        attempts,
			NonRetryableErrorTypes: []string{ErrInvalid, ErrNotFound, ErrEnvLost, ErrExists},
		},
	})
}

// onNode runs the commands, the stop and the exports on the placement's
// node.
func (r *runner) onNode(placed *CreateResult) (string, error) {
	if r.ctx.Err() != nil {
		// Cancelled while Create ran: it ignores cancellation, so what it
		// made is stopped here.
		r.stopAfterCancel(placed)
		return OutcomeCancelled, nil
	}
	for _, c := range r.req.Commands {
		out, err := r.exec(placed, c)
		if err != nil {
			switch {
			case temporal.IsCanceledError(err) || r.ctx.Err() != nil:
				var rec ExecResult
				var ce *temporal.CanceledError
				if errors.As(err, &ce) && ce.HasDetails() && ce.Details(&rec) == nil && rec.Record.ID != "" {
					r.addCommand(rec.Record)
				}
				r.stopAfterCancel(placed)
				if rec.Record.ID == "" && r.res.Stopped != nil && len(r.res.Stopped.Commands) > len(r.res.Commands) {
					// Exec's own record did not come back (it was not
					// started yet, or its node answered late): the
					// stop's record has it, newest last.
					r.addCommand(r.res.Stopped.Commands[len(r.res.Stopped.Commands)-1])
				}
				return OutcomeCancelled, nil
			case NodeLost(err):
				return OutcomeNodeLost, err
			case deadlineTimeout(err):
				// The environment's deadline ended the command: hostfork
				// stopped it on its own; its record is in the stop's.
				env, serr := r.stop(placed, api.ReasonDeadline)
				if serr != nil {
					if NodeLost(serr) {
						return OutcomeNodeLost, serr
					}
					return OutcomeFailed, fmt.Errorf("the environment's deadline passed, and its record could not be read: %w", serr)
				}
				var p ExecProgress
				var te *temporal.TimeoutError
				if errors.As(err, &te) && te.HasLastHeartbeatDetails() {
					_ = te.LastHeartbeatDetails(&p)
				}
				// The command is the one the heartbeat named, else the
				// newest (commands run one at a time).
				for i, rec := range env.Commands {
					if rec.ID == p.Command || (p.Command == "" && i == len(env.Commands)-1) {
						r.addCommand(rec)
					}
				}
				r.res.Stopped = env
				return r.exports(placed)
			default:
				_, _ = r.stop(placed, api.ReasonUser)
				return OutcomeFailed, fmt.Errorf("command %q: %w", c.Argv, err)
			}
		}
		r.addCommand(out.Record)
		if r.res.ExitStatus != 0 {
			break
		}
	}
	env, err := r.stop(placed, api.ReasonCompleted)
	switch {
	case err == nil:
		r.res.Stopped = env
	case temporal.IsCanceledError(err) || r.ctx.Err() != nil:
		r.stopAfterCancel(placed)
		return OutcomeCancelled, nil
	case NodeLost(err) && len(r.req.Export) > 0:
		return OutcomeNodeLost, err // the trees to export are on that node
	case NodeLost(err):
		// The commands are done and their records are in the result; the
		// environment stopped with its worker.
		r.res.Placements[len(r.res.Placements)-1].Cleanup = "its node was lost after the commands: the environment stopped with its worker (owner exit)"
		return OutcomeCompleted, nil
	default:
		return OutcomeFailed, fmt.Errorf("stopping the environment: %w", err)
	}
	return r.exports(placed)
}

func (r *runner) addCommand(rec api.Command) {
	r.res.Commands = append(r.res.Commands, rec)
	if s, ok := rec.ExitStatus(); ok {
		r.res.ExitStatus = s
	} else {
		r.res.ExitStatus = -1
	}
}

func (r *runner) exec(placed *CreateResult, c Command) (*ExecResult, error) {
	// The start-to-close timeout never exceeds the environment's
	// deadline; hostfork enforces that deadline by itself anyway.
	left := placed.DeadlineAt.Sub(workflow.Now(r.ctx))
	if placed.DeadlineAt.IsZero() {
		left = 24 * time.Hour
	}
	if left <= 0 {
		return nil, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, errors.New("the environment's deadline has passed"))
	}
	actx := r.nodeOptions(r.ctx, placed, left, 0)
	actx = workflow.WithScheduleToCloseTimeout(actx, left)
	var out ExecResult
	err := workflow.ExecuteActivity(actx, ActivityExec, ExecRequest{Env: placed.Env, Command: c}).Get(r.ctx, &out)
	return &out, err
}

// stop stops the placement's environment and returns its final record.
func (r *runner) stop(placed *CreateResult, reason api.StopReason) (*api.Env, error) {
	actx := r.nodeOptions(r.ctx, placed, 5*time.Minute, 5)
	var env api.Env
	if err := workflow.ExecuteActivity(actx, ActivityStop, StopRequest{Env: placed.Env, Reason: reason}).Get(r.ctx, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// stopAfterCancel stops the environment on a context the cancellation does
// not reach.
func (r *runner) stopAfterCancel(placed *CreateResult) {
	dctx, cancel := workflow.NewDisconnectedContext(r.ctx)
	defer cancel()
	actx := r.nodeOptions(dctx, placed, 5*time.Minute, 3)
	var env api.Env
	if err := workflow.ExecuteActivity(actx, ActivityStop, StopRequest{Env: placed.Env, Reason: api.ReasonCancelled}).Get(dctx, &env); err == nil {
		r.res.Stopped = &env
	} else {
		r.res.Placements[len(r.res.Placements)-1].Cleanup = "stop after cancellation failed (" + err.Error() + "); the environment ends at its deadline or with its worker"
	}
}

// abandon asks a lost placement's node to stop its environment, in case the
// node is alive after all (a spurious heartbeat timeout); finish waits for
// the answer. A dead node never answers: its environment already stopped
// with its worker.
func (r *runner) abandon(placed *CreateResult, idx int) {
	dctx, _ := workflow.NewDisconnectedContext(r.ctx)
	actx := r.nodeOptions(dctx, placed, time.Minute, 1)
	f := workflow.ExecuteActivity(actx, ActivityStop, StopRequest{Env: placed.Env, Reason: api.ReasonUser})
	r.cleanups = append(r.cleanups, cleanup{placement: idx, f: f})
}

func (r *runner) exports(placed *CreateResult) (string, error) {
	for _, t := range slices.Sorted(maps.Keys(r.req.Export)) { // deterministic order: this is workflow code
		actx := r.nodeOptions(r.ctx, placed, time.Hour, 3)
		var out api.ExportResult
		err := workflow.ExecuteActivity(actx, ActivityExport, ExportRequest{Env: placed.Env, Tree: t, Dest: r.req.Export[t]}).Get(r.ctx, &out)
		switch {
		case err == nil:
			r.res.Exports = append(r.res.Exports, out)
		case temporal.IsCanceledError(err) || r.ctx.Err() != nil:
			return OutcomeCancelled, nil
		case NodeLost(err):
			return OutcomeNodeLost, err
		default:
			return OutcomeFailed, fmt.Errorf("exporting tree %s: %w", t, err)
		}
	}
	return OutcomeCompleted, nil
}

// NodeLost reports whether an activity error means that the node (or the
// environment on it) is gone: a heartbeat timeout, a node-queue task that no
// worker took, or an EnvironmentLost error.
func NodeLost(err error) bool {
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_HEARTBEAT, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			return true
		}
		return false
	}
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrEnvLost
}

// deadlineTimeout reports whether an Exec error is its start-to-close or
// schedule-to-close timeout, which are the environment's deadline.
func deadlineTimeout(err error) bool {
	var te *temporal.TimeoutError
	if !errors.As(err, &te) {
		return false
	}
	switch te.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_START_TO_CLOSE, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
		return true
	}
	return false
}
