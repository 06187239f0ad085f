package hostfork

import (
	"context"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/engine"
)

// MaxForkCount is the most environments one Fork makes.
const MaxForkCount = engine.MaxForkCount

// ForkOptions configure a fork.
type ForkOptions struct {
	// Count is how many environments to make, 1 to MaxForkCount (0 is
	// refused, not taken as 1).
	Count int
	// Labels are added to the parent's labels on every child.
	Labels map[string]string
	// TTL, when set, is each child's time limit from its activation;
	// otherwise the parent's spec's limit applies.
	TTL time.Duration
	// OwnerExit, when set, is each child's owner-exit policy (stop or
	// detach); otherwise the parent's spec's applies. The children's
	// owner is the process that forks.
	OwnerExit string
}

func (o ForkOptions) engine() engine.ForkOptions {
	return engine.ForkOptions{Count: o.Count, Labels: o.Labels, TTL: o.TTL, OwnerExit: o.OwnerExit}
}

// Fork forks an environment (by id or unique prefix; see Env.Fork) and
// returns the children's records. On an error after some children were
// made, they are returned with it (the caller's to keep or stop).
func (h *Host) Fork(ctx context.Context, envPrefix string, opts ForkOptions) ([]EnvRecord, error) {
	id, err := h.resolveAs(ctx, envPrefix, "env", "is a command; give its environment", api.ErrInvalid)
	if err != nil {
		return nil, err
	}
	recs, err := h.e.Fork(ctx, id, opts.engine())
	out := make([]EnvRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, *r)
	}
	return out, err
}

// Fork makes opts.Count new environments whose private trees start as
// this environment's trees at one instant: its commands are frozen
// (cgroup.freeze of their group; its guardians and keeper run on), the
// trees are taken (a btrfs snapshot; an overlay upper or a copy cloned
// with reflink where the filesystem can, copied otherwise, and the tree's
// note says which; a git worktree on a new branch hostfork/CHILD/TREE at
// the commit the parent's branch is at, filled with the parent's files,
// its uncommitted changes included), and the commands are thawed. The freeze window is
// recorded in each child's Fork field. Processes are not cloned: each
// child is a full environment (the parent's spec, with its own trees,
// view, limits and deadline) with no commands. A stopped environment is
// forked without a freeze. A count outside 1..MaxForkCount is ErrInvalid;
// an active environment without a cgroup (the subreaper tier) is
// ErrUnsupported. On failure no child is left half-made: the children
// that were made are returned with the error, the caller's to keep or
// stop.
func (e *Env) Fork(ctx context.Context, opts ForkOptions) ([]*Env, error) {
	recs, err := e.h.e.Fork(ctx, e.rec.ID, opts.engine())
	out := make([]*Env, 0, len(recs))
	for _, r := range recs {
		out = append(out, &Env{h: e.h, rec: *r})
	}
	return out, err
}
