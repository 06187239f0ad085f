package hostfork

import (
	"context"
	"fmt"
	"sync"

	"github.com/habemus-papadum/hostfork/api"
)

// Env is a handle on an environment: created by this process (Create,
// Run) or reopened (OpenEnv). It restores management access, not another
// process's pipes.
type Env struct {
	h   *Host
	mu  sync.Mutex
	rec EnvRecord
}

// Create allocates the environment p describes — its record, run
// directory, cgroups, limit groups, trees and keeper — in two durable
// commits (a reservation of everything it will make, then the identities
// of what it made). A failure removes exactly what was made and records
// the environment failed. The environment lives until Stop, its deadline,
// or its owner's exit under owner-exit stop.
func (h *Host) Create(ctx context.Context, p *Plan) (*Env, error) {
	rec, _, err := h.e.Create(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	return &Env{h: h, rec: *rec}, nil
}

// Run creates the environment p describes with c as its first command and
// starts c: the environment stops when c's tree has exited (and, like any
// environment, at its deadline). It is Create + Start + Env.Stop in three
// commits: the reservation of both, the registration of c's guardian with
// the environment's activation, and c's result with the environment's
// stop. The reservation and the result are synced to disk; the
// registration is too when c is detached (owner-exit detach) or the
// environment has trees, and otherwise becomes durable with the result
// (docs/decisions.md, entry 62). c must not be started.
func (h *Host) Run(ctx context.Context, p *Plan, c *Command) (*Env, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return nil, fmt.Errorf("hostfork: Command already started: %w", api.ErrInvalid)
	}
	cs, err := c.spec()
	if err != nil {
		return nil, err
	}
	cs.AutoStop = true
	rec, r, err := h.e.Create(ctx, p, cs)
	c.closeStdin()
	if err != nil {
		return nil, err
	}
	env := &Env{h: h, rec: *rec}
	c.h, c.envID = h, rec.ID
	c.attach(ctx, r)
	return env, nil
}

// Command prepares a command for Run (its environment is made by Run).
func (h *Host) Command(argv ...string) *Command { return &Command{Argv: argv, h: h} }

// OpenEnv returns a handle on an existing environment (by id or unique
// prefix). The handle's record is read without its commands (Commands and
// Refresh read them), so opening an environment, and starting a command in
// it, costs the same however many commands it has run.
func (h *Host) OpenEnv(ctx context.Context, idPrefix string) (*Env, error) {
	id, err := h.resolveAs(ctx, idPrefix, "env", "is a command, not an environment", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	rec, err := h.e.EnvOpen(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Env{h: h, rec: *rec}, nil
}

// ID is the environment's id.
func (e *Env) ID() string { return e.rec.ID }

// Record returns the environment's last known record.
func (e *Env) Record() EnvRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec
}

// Refresh reads the environment's record again (with its commands).
func (e *Env) Refresh(ctx context.Context) (EnvRecord, error) {
	rec, err := e.h.e.Env(ctx, e.rec.ID)
	if err != nil {
		return e.Record(), err
	}
	e.mu.Lock()
	e.rec = *rec
	e.mu.Unlock()
	return *rec, nil
}

// Paths maps each private tree's name to the path the environment's
// commands use for it.
func (e *Env) Paths() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]string{}
	for _, t := range e.rec.Trees {
		out[t.Name] = t.WorkloadPath
	}
	return out
}

// Command prepares a command in the environment. Set its fields, then
// Start (or Capture).
func (e *Env) Command(argv ...string) *Command {
	return &Command{Argv: argv, h: e.h, envID: e.rec.ID}
}

// Commands returns handles on the environment's commands, oldest first:
// a command this process started comes with its live handle, any other
// with a reopened one (OpenCommand).
func (e *Env) Commands(ctx context.Context) ([]*Command, error) {
	recs, err := e.h.e.Commands(ctx, api.CommandFilter{Env: e.rec.ID})
	if err != nil {
		return nil, err
	}
	out := make([]*Command, 0, len(recs))
	for i := range recs {
		out = append(out, e.h.commandHandle(&recs[i]))
	}
	return out, nil
}

// Stop stops the environment (see Host.StopEnv).
func (e *Env) Stop(ctx context.Context, opts StopOptions) error {
	rec, err := e.h.e.StopEnv(ctx, e.rec.ID, opts.engine())
	if rec != nil {
		e.mu.Lock()
		e.rec = *rec
		e.mu.Unlock()
	}
	return err
}

// Export copies one of the environment's trees to dest (see Host.Export).
func (e *Env) Export(ctx context.Context, tree, dest string, opts ExportOptions) (*ExportResult, error) {
	return e.h.Export(ctx, e.rec.ID, tree, dest, opts)
}
