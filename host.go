package hostfork

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/engine"
	"github.com/habemus-papadum/hostfork/internal/export"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/spec"
)

// Options configure a Host.
type Options struct {
	// Root is the store directory; "" means DefaultRoot().
	Root string
	// CgroupParent is the cgroup2 directory under which environments get
	// their groups; "" means $HOSTFORK_CGROUP_PARENT, else <cgroup2
	// mount>/hostfork for root, else the user's delegated subtree.
	CgroupParent string
	// Exe is the program re-executed as the guardian and the keeper; ""
	// means the running program itself (/proc/self/exe), which carries
	// them: every binary that imports hostfork does.
	Exe string
}

// Host is an open store plus what was learned about this host. It is safe
// for concurrent use.
type Host struct {
	e *engine.Engine
	// bg counts the stops this Host's handles run on their own (a
	// command's context cancelled): Close lets them finish first.
	bg        sync.WaitGroup
	closing   chan struct{}
	closeOnce sync.Once
}

// DefaultRoot is /var/lib/hostfork for root, else $XDG_STATE_HOME/hostfork
// or ~/.local/state/hostfork. $HOSTFORK_ROOT overrides it.
func DefaultRoot() (string, error) { return engine.DefaultRoot() }

// Open opens the store at opts.Root, creating it (mode 0700, files 0600)
// if needed. It refuses a store that another user could write or replace
// (the store or any directory above it; a root-owned sticky directory such
// as /tmp is fine), a non-empty directory that is not a store, and a store
// whose registry was lost; each error names the path and the fix and
// matches ErrStore.
func Open(ctx context.Context, opts Options) (*Host, error) {
	e, err := engine.Open(ctx, engine.Options{Root: opts.Root, CgroupParent: opts.CgroupParent, Exe: opts.Exe})
	if err != nil {
		return nil, err
	}
	return &Host{e: e, closing: make(chan struct{})}, nil
}

// Root is the store directory.
func (h *Host) Root() string { return h.e.Root() }

// Close releases the registry. Commands started through this Host keep
// running under their owner-exit policy (until this process exits); their
// pending and later waits return ErrClosed, never a record that is not
// final as if it were a result.
func (h *Host) Close() error {
	h.closeOnce.Do(func() { close(h.closing) })
	done := make(chan struct{})
	go func() { h.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a stop that hangs must not hang Close
	}
	return h.e.Close()
}

// Capabilities probes (once) what ownership tiers this host offers.
func (h *Host) Capabilities() Capabilities { return h.e.Capabilities() }

// Config reads the store's configuration (config.yaml), with defaults.
func (h *Host) Config() (*Config, error) { return h.e.Config() }

// Plan validates s against this host and resolves it. Errors are for
// malformed requests (ErrInvalid); what the host can't do is listed in
// Plan.Unsupported, and Create refuses such a plan (ErrUnsupported).
func (h *Host) Plan(ctx context.Context, s spec.Environment) (*Plan, error) { return h.e.Plan(ctx, s) }

// Resolve finds the environment or command an id or a unique id prefix
// names: kind is "env" or "command".
func (h *Host) Resolve(ctx context.Context, idPrefix string) (kind, id string, err error) {
	return h.e.Resolve(ctx, idPrefix)
}

// Envs lists environments by filter, oldest first. Each record says what a
// reader can prove now: an environment whose stop is due and of which
// nothing runs any more is recorded stopped as it is read.
func (h *Host) Envs(ctx context.Context, f EnvFilter) ([]EnvRecord, error) { return h.e.Envs(ctx, f) }

// Commands lists commands by filter (environment, labels, states, live),
// oldest first, each settled from its current evidence.
func (h *Host) Commands(ctx context.Context, f CommandFilter) ([]CommandRecord, error) {
	return h.e.Commands(ctx, f)
}

// Status resolves an id (environment or command, unique prefix) and
// returns its record: exactly one of env and cmd is set. An
// environment's record includes its commands.
func (h *Host) Status(ctx context.Context, idPrefix string) (env *EnvRecord, cmd *CommandRecord, err error) {
	kind, id, err := h.e.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, nil, err
	}
	if kind == "command" {
		c, err := h.e.Command(ctx, id)
		return nil, c, err
	}
	e, err := h.e.Env(ctx, id)
	return e, nil, err
}

// StopOptions configure a stop.
type StopOptions struct {
	// Reason is recorded as the requested stop reason (default "user").
	// An earlier recorded reason is kept: the first decision wins.
	Reason StopReason
	// Grace is how long members get after SIGTERM before SIGKILL; 0 means
	// the environment's grace (default 2s). Negative means kill at once.
	Grace time.Duration
	// Abandon releases an unverified tree — one whose exit can't be
	// proven, e.g. its guardian was killed — without that proof. It is
	// the operator's explicit choice and is recorded (reason "abandoned",
	// with what was given up). A live tree is refused.
	Abandon bool
}

func (o StopOptions) engine() engine.StopOptions {
	return engine.StopOptions{Reason: o.Reason, Grace: o.Grace, Abandon: o.Abandon}
}

// resolveAs resolves an id or unique prefix that must name kind ("env"
// or "command"); the other kind fails with "ID why" and sentinel.
func (h *Host) resolveAs(ctx context.Context, idPrefix, kind, why string, sentinel error) (string, error) {
	k, id, err := h.e.Resolve(ctx, idPrefix)
	if err != nil {
		return "", err
	}
	if k != kind {
		return "", fmt.Errorf("%s %s: %w", id, why, sentinel)
	}
	return id, nil
}

// StopEnv stops an environment (by id or unique prefix): every command
// tree is stopped and confirmed gone, the keeper ends, the empty cgroups
// go, and the stop is recorded. It deletes no file. A stop that can't be
// confirmed returns an error matching ErrUnverified.
func (h *Host) StopEnv(ctx context.Context, idPrefix string, opts StopOptions) (*EnvRecord, error) {
	id, err := h.resolveAs(ctx, idPrefix, "env", "is a command (use StopCommand)", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	return h.e.StopEnv(ctx, id, opts.engine())
}

// StopCommand stops one command tree (by id or unique prefix): SIGTERM
// to every member (nested cgroups and processes that left the cgroup
// included), the grace, then the quiesced kill, then verification. The
// tree's guardian learns the reason first, so its receipt carries it.
func (h *Host) StopCommand(ctx context.Context, idPrefix string, opts StopOptions) (*CommandRecord, error) {
	id, err := h.resolveAs(ctx, idPrefix, "command", "is an environment (use StopEnv)", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	return h.e.StopCommand(ctx, id, opts.engine())
}

// Events yields the registry's events after sequence since, in order. With
// follow it keeps yielding as new events are committed, until ctx ends (a
// last ctx.Err()) or the Host is closed (ErrClosed). A consumer that
// resumes with the last sequence it saw misses nothing and sees nothing
// twice.
func (h *Host) Events(ctx context.Context, since int64, follow bool) iter.Seq2[Event, error] {
	return h.e.Events(ctx, since, follow)
}

// LastEvent is the sequence of the newest event (0: none yet).
func (h *Host) LastEvent(ctx context.Context) (int64, error) { return h.e.LastEvent(ctx) }

// EventCounts is how many events of each kind (and stop reason) the store
// has recorded since it was made: monotonic store-level counters, kept
// when retention deletes the records (the metrics' *_total series).
func (h *Host) EventCounts(ctx context.Context) ([]EventCount, error) { return h.e.EventCounts(ctx) }

// Reap reconciles the ledger with what exists and finishes interrupted
// work (see `hostfork reap`). It is idempotent and safe beside live runs.
func (h *Host) Reap(ctx context.Context) (*ReapReport, error) { return h.e.Reap(ctx) }

// GCOptions select what a gc pass may delete.
type GCOptions struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// RetainTrees / RetainEvidence override the configured and
	// per-environment retention for this call.
	RetainTrees, RetainEvidence *time.Duration
	// Force lists environments (ids or prefixes) whose trees and evidence
	// are discarded now, whatever their retention. Live environments are
	// still refused. A forced worktree tree is removed also with
	// uncommitted changes.
	Force []string
	// DeleteBranches also deletes the branch of each worktree tree gc
	// removes (by default the branch stays, with its commits).
	DeleteBranches bool
}

// GC applies retention to stopped environments: private trees first, then
// evidence once no tree remains. Every deletion checks containment in the
// store's own directories and the recorded identity first.
func (h *Host) GC(ctx context.Context, opts GCOptions) (*GCReport, error) {
	return h.e.GC(ctx, retention.GCOptions{DryRun: opts.DryRun, RetainTrees: opts.RetainTrees, RetainEvidence: opts.RetainEvidence, Force: opts.Force, DeleteBranches: opts.DeleteBranches})
}

// Usage measures the store: runs, bytes, pools, backlog.
func (h *Host) Usage(ctx context.Context) (*Usage, error) { return h.e.Usage(ctx) }

// BtrfsSizes measures the exclusive and shared extents of every allocated
// Btrfs tree (expensive; each figure carries the time it was measured).
func (h *Host) BtrfsSizes(ctx context.Context) ([]BtrfsSize, error) { return h.e.BtrfsSizes(ctx) }

// Capacity samples the host and the live agent workloads and computes the
// free admission slots.
func (h *Host) Capacity(ctx context.Context) (*CapacityReport, error) { return h.e.Capacity(ctx) }

// Paused reports whether new admission is paused.
func (h *Host) Paused(ctx context.Context) (bool, error) { return h.e.Paused(ctx) }

// SetPaused pauses or resumes admission. Running work continues either way.
func (h *Host) SetPaused(ctx context.Context, paused bool) error { return h.e.SetPaused(ctx, paused) }

// AddBaseline registers a prepared directory or Btrfs subvolume under name
// (host preparation: it only looks at the path).
func (h *Host) AddBaseline(ctx context.Context, name, path string) (*Baseline, error) {
	return h.e.AddBaseline(ctx, name, path)
}

// Baselines lists registered baselines.
func (h *Host) Baselines(ctx context.Context) ([]*Baseline, error) { return h.e.Baselines(ctx) }

// RemoveBaseline unregisters a baseline; its files are left alone.
func (h *Host) RemoveBaseline(ctx context.Context, name string) error {
	return h.e.RemoveBaseline(ctx, name)
}

// ExportOptions configure an export.
type ExportOptions struct {
	// Progress is called as files are copied, with the total counted
	// beforehand (0 if counting was skipped).
	Progress func(files, total int64)
	// Commit, for a worktree tree, commits everything in it on its
	// branch with this message first; with dest "" nothing is copied.
	Commit string
}

// Export copies an environment's tree (environment by id or unique
// prefix) to dest, which must not exist: hostfork creates it. The result
// is labelled complete, live/inconsistent, partial or failed. An existing
// destination is ErrExists; a missing tree ErrNotFound; a copy that broke
// off ErrExportFailed (the result names where the partial copy is).
func (h *Host) Export(ctx context.Context, envPrefix, tree, dest string, opts ExportOptions) (*ExportResult, error) {
	id, err := h.resolveAs(ctx, envPrefix, "env", "is a command; give its environment", api.ErrInvalid)
	if err != nil {
		return nil, err
	}
	return h.e.Export(ctx, id, tree, dest, export.ExportOptions{Progress: opts.Progress, Commit: opts.Commit})
}

// RecaptureHostShell captures the login shell's environment again for the
// host-shell and toolchain policies.
func (h *Host) RecaptureHostShell(ctx context.Context) error { return h.e.RecaptureHostShell(ctx) }

// LookPath resolves a program on the host the way a launch without a view
// does, so a caller can reject a missing executable before creating
// anything.
func LookPath(argv0 string, env []string) (string, error) { return launchenv.LookPath(argv0, env) }

// InheritedEnv is os.Environ() without Git redirections (GIT_DIR, ...).
func InheritedEnv() []string { return launchenv.InheritedEnv() }

// RedactEnv returns env with the values of its spec's explicit
// environment variables replaced by "<redacted>" (for output read by more
// eyes than the store's owner).
func RedactEnv(env EnvRecord) EnvRecord { return records.RedactEnv(env) }

// Redacted stands for a hidden value in a record RedactEnv returned.
const Redacted = records.Redacted
