// Package deadline moves an active environment's deadline, later or
// earlier (Engine.SetDeadline, docs/decisions/100-extend.md): the record
// first, under the environment's lock, then every independent enforcer —
// the systemd scope, the deadline file the guardians and the keeper read,
// and a poke to each of them.
//
// Only the engine imports it.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/store"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/systemd"
)

// Move moves environment id's deadline to at, later or earlier, within
// cfg's maximum lifetime. Under the environment's lock (so no
// stop, reaper or other move interleaves) it records the move (the record
// and an env.deadline_moved event, one commit), then hands the new
// deadline to every independent enforcer before it returns: the systemd
// scope's RuntimeMaxUSec (first, so that a manager that refuses leaves
// nothing changed), the deadline file the guardians and the keeper read,
// and a poke to each of them. A caller that dies once it returned
// leaves the new deadline in force.
func Move(ctx context.Context, reg *records.Records, id string, at time.Time, cfg *store.Config) (*api.Env, error) {
	unlock, err := records.EnvLock(reg.RunDir(id), 5*time.Second)
	if errors.Is(err, lockfile.ErrBusy) {
		return nil, fmt.Errorf("environment %s: a stop or reaper holds it; try again: %w", id, api.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("environment %s: %w", id, err)
	}
	defer unlock()
	env, err := reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	boot, err := linux.BootID()
	if err != nil {
		return nil, err
	}
	now, nowMono := time.Now(), linux.MonotonicNow()
	if err := movable(env, at, now, nowMono, boot, cfg); err != nil {
		return nil, err
	}
	to := at.UTC()
	newMono := nowMono + at.Sub(now)
	// The systemd manager first (systemd-scope tier): a manager that can't
	// move a running scope's RuntimeMaxUSec would still stop the
	// environment at the old deadline, so a later one is refused with
	// nothing changed. An earlier one stands without it: the guardians and
	// the keeper stop first, the manager's later stop is only a backstop.
	if env.Unit != "" {
		err := moveScopeDeadline(ctx, env.Unit, newMono, env.Grace.D())
		if errors.Is(err, systemd.ErrReadOnly) && newMono > env.DeadlineMono {
			return nil, fmt.Errorf("environment %s runs in a systemd scope whose manager can't move a running scope's deadline later (RuntimeMaxUSec is read-only there; a newer systemd can): %w", id, api.ErrUnsupported)
		}
		if err != nil && !errors.Is(err, systemd.ErrReadOnly) {
			return nil, err
		}
	}
	next := *env
	next.DeadlineAt = &to
	next.DeadlineMono = newMono
	next.DeadlineMoves = append(slices.Clone(env.DeadlineMoves), api.DeadlineMove{From: env.DeadlineAt.UTC(), To: to, At: now.UTC()})
	var b registry.Batch
	b.UpdateEnv(env, &next)
	if err := reg.Commit(ctx, &b); err != nil {
		if env.Unit != "" {
			_ = moveScopeDeadline(context.WithoutCancel(ctx), env.Unit, env.DeadlineMono, env.Grace.D())
		}
		return nil, err
	}
	// The enforcers. Each failure is reported; the record already holds
	// the new deadline, which the reaper enforces as the backstop.
	var errs []error
	if err := supervise.MoveDeadline(env.RunDir, next.DeadlineMono); err != nil {
		errs = append(errs, fmt.Errorf("writing the deadline for the guardians and the keeper: %w", err))
	}
	poke := func(what string, id *api.Identity) {
		if id == nil {
			return
		}
		if err := supervise.Poke(records.ToLinux(id)); err != nil && !errors.Is(err, linux.ErrNoProcess) && !errors.Is(err, linux.ErrIdentityMismatch) {
			errs = append(errs, fmt.Errorf("telling %s: %w", what, err))
		}
	}
	poke("the keeper", env.Keeper)
	cmds, err := reg.Commands(ctx, registry.CommandQuery{Env: id})
	if err != nil {
		errs = append(errs, err)
	}
	for _, c := range cmds {
		if !c.State.Final() {
			poke("the guardian of "+c.ID, c.Guardian)
		}
	}
	if len(errs) > 0 {
		return &next, fmt.Errorf("environment %s: the deadline is recorded as %s, but not every enforcer took it: %w", id, to.Format(time.RFC3339), errors.Join(errs...))
	}
	return &next, nil
}

// movable says whether env's deadline may move to at: it is active in this
// boot, has a deadline whose stop has not begun, at is in the future and
// within the store's maximum lifetime.
func movable(env *api.Env, at, now time.Time, nowMono time.Duration, boot string, cfg *store.Config) error {
	if env.State != api.EnvActive {
		return fmt.Errorf("environment %s is %s: %w", env.ID, env.State, api.ErrEnvNotActive)
	}
	if env.DeadlineAt == nil || env.DeadlineMono == 0 {
		return fmt.Errorf("environment %s has no deadline to move (it was created without a ttl); stop it with 'hostfork stop': %w", env.ID, api.ErrInvalid)
	}
	if env.BootID != boot || nowMono >= env.DeadlineMono-env.Grace.D() {
		return fmt.Errorf("environment %s has reached its deadline: %w", env.ID, api.ErrEnvNotActive)
	}
	if !at.After(now) {
		return fmt.Errorf("the new deadline %s is not in the future; to stop the environment now, use 'hostfork stop %s': %w", at.UTC().Format(time.RFC3339), env.ID, api.ErrInvalid)
	}
	if cfg.Lifetime.Max != nil && env.ActivatedAt != nil {
		max := cfg.Lifetime.Max.D()
		if limit := env.ActivatedAt.Add(max); at.After(limit) {
			return fmt.Errorf("the new deadline %s is beyond the store's maximum lifetime of %v (lifetime.max in config.yaml), counted from the environment's activation at %s: the latest allowed is %s: %w",
				at.UTC().Format(time.RFC3339), max, env.ActivatedAt.UTC().Format(time.RFC3339), limit.UTC().Format(time.RFC3339), api.ErrInvalid)
		}
	}
	return nil
}

// moveScopeDeadline moves the scope's RuntimeMaxUSec (systemd-scope tier).
func moveScopeDeadline(ctx context.Context, unit string, deadlineMono, grace time.Duration) error {
	c, err := systemd.Connect(ctx, systemd.DefaultBus(), systemd.Options{})
	if err != nil {
		return fmt.Errorf("connecting to systemd to move %s's deadline: %w", unit, err)
	}
	defer c.Close()
	return c.MoveDeadline(ctx, unit, deadlineMono, grace)
}
