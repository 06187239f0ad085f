package hostfork

import (
	"context"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// ExtendOptions say where Extend moves the deadline: TTL from now, or
// Until, exactly one.
type ExtendOptions = api.DeadlineRequest

// DeadlineMove is one recorded move of a deadline.
type DeadlineMove = api.DeadlineMove

// Extend moves the environment's deadline later or earlier. The move is
// recorded (the record's deadline_moves and an env.deadline_moved event),
// and every independent enforcer (its guardians, its keeper, its systemd
// scope) holds the new deadline before Extend returns, so it holds however
// soon the caller dies. A deadline beyond the store's lifetime.max (from
// the environment's activation) is refused with ErrInvalid and nothing
// changes; an environment without a deadline, or whose deadline's stop has
// begun, can't be extended.
func (e *Env) Extend(ctx context.Context, o ExtendOptions) (EnvRecord, error) {
	if err := o.Validate(); err != nil {
		return e.Record(), err
	}
	rec, err := e.h.e.SetDeadline(ctx, e.rec.ID, o.At(time.Now()))
	if rec == nil {
		return e.Record(), err
	}
	// The handle's record, like OpenEnv's, is read without its commands.
	e.mu.Lock()
	e.rec = *rec
	e.mu.Unlock()
	return *rec, err
}

// Extend is Env.Extend by environment id or unique prefix; it returns the
// record as Status reads it after the move (with its commands).
func (h *Host) Extend(ctx context.Context, idPrefix string, o ExtendOptions) (*EnvRecord, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	id, err := h.resolveAs(ctx, idPrefix, "env", "is a command; extend its environment", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	rec, err := h.e.SetDeadline(ctx, id, o.At(time.Now()))
	if rec == nil {
		return nil, err
	}
	if r, rerr := h.e.Env(ctx, id); rerr == nil {
		rec = r
	}
	return rec, err
}
