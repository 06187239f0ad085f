package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// Defaults of Options.
const (
	DefaultTTL          = time.Hour
	DefaultMaxTTL       = 24 * time.Hour
	DefaultReapInterval = time.Minute
	// DefaultNodeSlots bounds the concurrent activities on a node's own
	// queue. They mostly wait on process trees; admission, not this
	// number, bounds the work.
	DefaultNodeSlots = 1000
)

// Options configure Run.
type Options struct {
	// Node names this node: its queue is flow.NodeQueue(Node).
	Node string
	// Client is connected to the cluster and namespace.
	Client client.Client
	// Host is the node's open store. Run reaps it; it does not close it.
	Host *hostfork.Host
	// DefaultTTL is the max runtime of an environment whose spec has none;
	// MaxTTL the longest one accepted.
	DefaultTTL, MaxTTL time.Duration
	// ReapInterval is how often the store is reaped after the reap at
	// start.
	ReapInterval time.Duration
	// NodeSlots bounds the concurrent activities on the node's queue.
	NodeSlots int
	// Logger receives the worker's own logs; nil discards them.
	Logger *slog.Logger
	// Ready is called once the reap at start is done and both queues are
	// being polled.
	Ready func()
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// NewActivities returns the activities of o.Node over o.Host.
func NewActivities(o Options) *Activities {
	o = o.withDefaults()
	a := &Activities{h: o.Host, node: o.Node, defaultTTL: o.DefaultTTL, maxTTL: o.MaxTTL, log: o.Logger}
	a.fault = os.Getenv(FaultEnv)
	return a
}

func (o Options) withDefaults() Options {
	if o.DefaultTTL <= 0 {
		o.DefaultTTL = DefaultTTL
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	o.DefaultTTL = min(o.DefaultTTL, o.MaxTTL)
	if o.ReapInterval <= 0 {
		o.ReapInterval = DefaultReapInterval
	}
	if o.NodeSlots <= 0 {
		o.NodeSlots = DefaultNodeSlots
	}
	if o.Logger == nil {
		o.Logger = discard()
	}
	return o
}

// RegisterShared registers what the shared queue serves: the workflow and
// Create.
func (a *Activities) RegisterShared(r worker.Registry) {
	r.RegisterWorkflowWithOptions(flow.RunInEnvironment, workflow.RegisterOptions{Name: flow.WorkflowRunInEnvironment})
	r.RegisterActivityWithOptions(a.Create, activity.RegisterOptions{Name: flow.ActivityCreate})
}

// RegisterNode registers what the node's own queue serves.
func (a *Activities) RegisterNode(r worker.Registry) {
	r.RegisterActivityWithOptions(a.Exec, activity.RegisterOptions{Name: flow.ActivityExec})
	r.RegisterActivityWithOptions(a.Stop, activity.RegisterOptions{Name: flow.ActivityStop})
	r.RegisterActivityWithOptions(a.Export, activity.RegisterOptions{Name: flow.ActivityExport})
	r.RegisterActivityWithOptions(a.Status, activity.RegisterOptions{Name: flow.ActivityStatus})
	r.RegisterActivityWithOptions(a.Logs, activity.RegisterOptions{Name: flow.ActivityLogs})
}

// Run reaps the store, then serves the shared queue and the node's queue
// until ctx ends, reaping every ReapInterval. Every environment and command
// it makes is owned by this process with owner-exit stop: when the process
// ends, so do they.
func Run(ctx context.Context, o Options) error {
	o = o.withDefaults()
	if !flow.ValidNode(o.Node) {
		return fmt.Errorf("node name %q: use letters, digits, '.', '_', '-' (max 63), starting with a letter or digit", o.Node)
	}
	if o.Client == nil || o.Host == nil {
		return errors.New("node.Run needs a Client and a Host")
	}
	log := o.Logger.With("node", o.Node)
	o.Logger = log
	reap(ctx, o.Host, log, true)

	a := NewActivities(o)
	host, _ := os.Hostname()
	identity := fmt.Sprintf("%s@%s:%d", o.Node, host, os.Getpid())

	slots := &admissionSlots{h: o.Host, poll: 500 * time.Millisecond, log: log}
	fixed := func(n int) worker.SlotSupplier {
		s, err := worker.NewFixedSizeSlotSupplier(n)
		if err != nil {
			panic(err) // n is a positive constant
		}
		return s
	}
	tuner, err := worker.NewCompositeTuner(worker.CompositeTunerOptions{
		WorkflowSlotSupplier:        fixed(100),
		ActivitySlotSupplier:        slots,
		LocalActivitySlotSupplier:   fixed(10),
		NexusSlotSupplier:           fixed(10),
		SessionActivitySlotSupplier: fixed(10),
	})
	if err != nil {
		return err
	}
	shared := worker.New(o.Client, flow.SharedQueue, worker.Options{
		Identity: identity,
		Tuner:    tuner,
		// Placement happens in matching, among the nodes that poll.
		DisableEagerActivities:       true,
		MaxHeartbeatThrottleInterval: HeartbeatInterval,
		// A workflow whose last task ran on a node that died moves on
		// to another node's worker after this long.
		StickyScheduleToStartTimeout: 2 * time.Second,
		OnFatalError:                 func(err error) { log.Error("shared-queue worker failed", "error", err) },
	})
	a.RegisterShared(shared)
	own := worker.New(o.Client, flow.NodeQueue(o.Node), worker.Options{
		Identity:                           identity,
		MaxConcurrentActivityExecutionSize: o.NodeSlots,
		MaxHeartbeatThrottleInterval:       HeartbeatInterval,
		DisableEagerActivities:             true,
		OnFatalError:                       func(err error) { log.Error("node-queue worker failed", "error", err) },
	})
	a.RegisterNode(own)

	if err := own.Start(); err != nil {
		return fmt.Errorf("starting the worker of %s: %w", flow.NodeQueue(o.Node), err)
	}
	defer own.Stop()
	if err := shared.Start(); err != nil {
		return fmt.Errorf("starting the worker of %s: %w", flow.SharedQueue, err)
	}
	defer shared.Stop()
	log.Info("worker started", "queues", []string{flow.SharedQueue, flow.NodeQueue(o.Node)}, "identity", identity, "root", o.Host.Root())
	if o.Ready != nil {
		o.Ready()
	}

	t := time.NewTicker(o.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("worker stopping: its environments stop with it (owner exit)")
			return nil
		case <-t.C:
			reap(ctx, o.Host, log, false)
		}
	}
}

// reap runs Host.Reap and logs what it did; at start it always logs.
func reap(ctx context.Context, h *hostfork.Host, log *slog.Logger, start bool) {
	rep, err := h.Reap(ctx)
	if err != nil {
		log.Error("reap failed", "error", err)
		return
	}
	if start || len(rep.Actions) > 0 || len(rep.Pending) > 0 {
		log.Info("reap", "at_start", start, "checked", rep.Checked, "actions", rep.Actions, "pending", rep.Pending)
	}
}
