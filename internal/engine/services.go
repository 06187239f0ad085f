package engine

import (
	"context"
	"iter"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/admission"
	"github.com/habemus-papadum/hostfork/internal/deadline"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/export"
	"github.com/habemus-papadum/hostfork/internal/fork"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/provision"
	"github.com/habemus-papadum/hostfork/internal/reap"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/usage"
	"github.com/habemus-papadum/hostfork/spec"
)

// The store-wide passes live in their own packages (internal/reap,
// internal/retention, internal/export, internal/usage); the engine opens
// them on its records and hands them the few operations of its own they
// need (ops).

// Reap settles what crashes interrupted (reap.Reaper.Reap).
func (e *Engine) Reap(ctx context.Context) (*api.ReapReport, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return reap.New(e.root, e.reg, ops{e}).Reap(ctx)
}

// GC applies retention (retention.Collector.GC).
func (e *Engine) GC(ctx context.Context, opts retention.GCOptions) (*api.GCReport, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return retention.New(e.root, e.reg).GC(ctx, opts)
}

// Export copies an environment's tree out to dest (export.Exporter.Export).
func (e *Engine) Export(ctx context.Context, envID, tree, dest string, opts export.ExportOptions) (*api.ExportResult, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return export.New(e.root, e.reg, e.opts.Exe).Export(ctx, envID, tree, dest, opts)
}

// Usage measures the store (usage.Meter.Usage).
func (e *Engine) Usage(ctx context.Context) (*api.Usage, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return usage.New(e.root, e.reg, ops{e}).Usage(ctx)
}

// BtrfsSizes measures every allocated Btrfs tree (usage.Meter.BtrfsSizes).
func (e *Engine) BtrfsSizes(ctx context.Context) ([]api.BtrfsSize, error) {
	return usage.New(e.root, e.reg, ops{e}).BtrfsSizes(ctx)
}

// ops is the engine as reap.Engine, usage.Reader and admission.Reader see
// it.
type ops struct{ e *Engine }

var (
	_ fork.Engine      = ops{}
	_ reap.Engine      = ops{}
	_ usage.Reader     = ops{}
	_ admission.Reader = ops{}
)

func (o ops) EnvFacts(ctx context.Context, env *api.Env, cmds []*api.Command) (decide.EnvFacts, []*api.Command) {
	return o.e.envFacts(ctx, env, cmds)
}

func (o ops) StopCommand(ctx context.Context, env *api.Env, c *api.Command, reason api.StopReason) error {
	_, err := o.e.stopCommand(ctx, env, c, StopOptions{Reason: reason})
	return err
}

func (o ops) StopEnv(ctx context.Context, env *api.Env, reason api.StopReason) error {
	_, err := o.e.stopEnvLocked(ctx, env, StopOptions{Reason: reason})
	return err
}

func (o ops) AbandonCreation(ctx context.Context, env *api.Env) { o.e.abandonInterrupted(ctx, env) }

func (o ops) Launching(id string) bool { return o.e.runningOf(id) != nil }

func (o ops) Reconcile(ctx context.Context, env *api.Env) *api.Env {
	return o.e.reconcile(ctx, env, nil, false)
}

func (o ops) Plan(ctx context.Context, s spec.Environment) (*spec.Plan, error) {
	return o.e.Plan(ctx, s)
}

func (o ops) PlanView(ctx context.Context, p *spec.Plan) (map[string]*planner.Source, error) {
	return o.e.plans().PlanView(ctx, p)
}

func (o ops) Reserve(ctx context.Context, p *spec.Plan, infos map[string]*planner.Source, origin *api.ForkOrigin) (fork.Child, error) {
	c, err := o.e.reserveEnv(ctx, p, infos, nil, origin)
	if err != nil {
		return nil, err
	}
	c.forked = true // the fork takes its trees
	return c, nil
}

func (o ops) Commands(ctx context.Context, f api.CommandFilter) ([]api.Command, error) {
	return o.e.Commands(ctx, f)
}

// SetDeadline moves environment id's deadline to at, later or earlier
// (deadline.Move).
func (e *Engine) SetDeadline(ctx context.Context, id string, at time.Time) (*api.Env, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	cfg, err := e.Config()
	if err != nil {
		return nil, err
	}
	return deadline.Move(ctx, e.reg, id, at, cfg)
}

// ViewRoot opens the root of environment id's view (provision.ViewRoot).
func (e *Engine) ViewRoot(ctx context.Context, id string) (*safefs.Root, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return provision.ViewRoot(ctx, e.reg, id)
}

// ForkOptions asks for a fork (fork.Options).
type ForkOptions = fork.Options

// MaxForkCount is the most environments one fork makes.
const MaxForkCount = fork.MaxCount

// Fork makes o.Count environments whose trees start as environment id's
// trees at one instant (fork.Fork).
func (e *Engine) Fork(ctx context.Context, id string, o ForkOptions) ([]*api.Env, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return fork.Fork(ctx, e.reg, ops{e}, id, o)
}

// plans is the store's planner (internal/planner).
func (e *Engine) plans() *planner.Planner { return planner.New(e.root, e.reg, e.Capabilities) }

// Plan validates s against this host and resolves it (planner.Planner.Plan).
func (e *Engine) Plan(ctx context.Context, s spec.Environment) (*spec.Plan, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.plans().Plan(ctx, s)
}

// AddBaseline registers a prepared directory or Btrfs subvolume under
// name (planner.Planner.AddBaseline).
func (e *Engine) AddBaseline(ctx context.Context, name, path string) (*api.Baseline, error) {
	return e.plans().AddBaseline(ctx, name, path)
}

// Baselines lists registered baselines.
func (e *Engine) Baselines(ctx context.Context) ([]*api.Baseline, error) {
	return e.plans().Baselines(ctx)
}

// RemoveBaseline unregisters a baseline (planner.Planner.RemoveBaseline).
func (e *Engine) RemoveBaseline(ctx context.Context, name string) error {
	return e.plans().RemoveBaseline(ctx, name)
}

// admission is the store's admission (internal/admission).
func (e *Engine) admission() *admission.Admission { return admission.New(e.root, e.reg, ops{e}) }

// Paused reports whether new admission is paused.
func (e *Engine) Paused(ctx context.Context) (bool, error) { return e.admission().Paused(ctx) }

// SetPaused pauses or resumes admission; running work continues.
func (e *Engine) SetPaused(ctx context.Context, paused bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	return e.admission().SetPaused(ctx, paused)
}

// Capacity samples the host and the live agent workloads and computes the
// admission capacity (admission.Admission.Capacity).
func (e *Engine) Capacity(ctx context.Context) (*api.CapacityReport, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.admission().Capacity(ctx)
}

// hostShellCacheDir is where the login-shell capture is cached.
func (e *Engine) hostShellCacheDir() string { return filepath.Join(e.root, "cache") }

// RecaptureHostShell captures the login shell's environment again and
// replaces the cached capture that the host-shell and toolchain policies
// use. A failed capture leaves the cache as it was.
func (e *Engine) RecaptureHostShell(ctx context.Context) error {
	_, err := launchenv.HostShell(ctx, launchenv.HostShellOptions{CacheDir: e.hostShellCacheDir(), Refresh: true, Inherited: os.Environ()})
	return err
}

// EventsSince reads up to limit events after sequence since (limit <= 0:
// all).
func (e *Engine) EventsSince(ctx context.Context, since int64, limit int) ([]api.Event, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.reg.Events(ctx, since, limit)
}

// LastEvent is the highest event sequence so far.
func (e *Engine) LastEvent(ctx context.Context) (int64, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	return e.reg.LastEvent(ctx)
}

// EventCounts is how many events of each kind and reason the store has
// ever recorded (registry.DB.EventCounts).
func (e *Engine) EventCounts(ctx context.Context) ([]api.EventCount, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.reg.EventCounts(ctx)
}

// Events yields the events after sequence since, in order, following new
// ones with follow until ctx ends or the engine is closed
// (records.Records.Stream).
func (e *Engine) Events(ctx context.Context, since int64, follow bool) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		if err := e.checkOpen(); err != nil {
			yield(api.Event{}, err)
			return
		}
		for ev, err := range e.reg.Stream(ctx, since, follow, e.closed) {
			if !yield(ev, err) {
				return
			}
		}
	}
}
