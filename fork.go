package hostfork

import (
	"context"
	"time"

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
}

// Fork makes opts.Count new environments whose private trees start as
// this environment's trees at one instant: its commands are frozen
// (cgroup.freeze of their group; its guardians and keeper run on), the
// trees are taken (a btrfs snapshot; an overlay upper or a copy cloned
// with reflink where the filesystem can, copied otherwise, and the tree's
// note says which), and the commands are thawed. The freeze window is
// recorded in each child's Fork field. Processes are not cloned: each
// child is a full environment (the parent's spec, with its own trees,
// view, limits and deadline) with no commands. A stopped environment is
// forked without a freeze. A count outside 1..MaxForkCount is ErrInvalid;
// an active environment without a cgroup (the subreaper tier) is
// ErrUnsupported. On failure no child is left half-made.
func (e *Env) Fork(ctx context.Context, opts ForkOptions) ([]*Env, error) {
	recs, err := e.h.e.Fork(ctx, e.rec.ID, engine.ForkOptions{Count: opts.Count, Labels: opts.Labels, TTL: opts.TTL})
	out := make([]*Env, 0, len(recs))
	for _, r := range recs {
		out = append(out, &Env{h: e.h, rec: *r})
	}
	return out, err
}
