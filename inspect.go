package hostfork

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Process states answered by ps (DESIGN.md: "is it alive").
const (
	StateAlive      = "alive"
	StateExited     = "exited"
	StateUnverified = "unverified"
)

// ProcessRow answers the five questions for one command: what (argv), why
// (purpose, labels), where its output is, whether it is alive, and whether
// this user can stop it.
type ProcessRow struct {
	ID         string            `json:"id"`
	Env        string            `json:"env"`
	Purpose    string            `json:"purpose"`
	Labels     map[string]string `json:"labels"`
	Argv       []string          `json:"argv"`
	StdoutPath string            `json:"stdout_path"`
	StderrPath string            `json:"stderr_path"`
	State      string            `json:"state"`
	Stoppable  bool              `json:"stoppable"`
	PID        int               `json:"pid,omitempty"`
	Tier       string            `json:"tier"`
	CreatedAt  time.Time         `json:"created_at"`
	ExitCode   *int              `json:"exit_code"`
	Signal     *int              `json:"signal"`
	StopReason string            `json:"stop_reason,omitempty"`
	DeadlineAt *time.Time        `json:"deadline_at,omitempty"`
}

// ListOptions select ps rows.
type ListOptions struct {
	// All includes exited commands.
	All bool
}

// List settles and lists commands: by default those alive or unverified.
func (h *Host) List(ctx context.Context, opts ListOptions) ([]ProcessRow, error) {
	f := registry.CommandFilter{}
	if !opts.All {
		f.States = []string{registry.CmdReserved, registry.CmdRunning, registry.CmdUnknown}
	}
	cmds, err := h.reg.Commands(ctx, f)
	if err != nil {
		return nil, err
	}
	envs := map[string]*registry.Env{}
	rows := make([]ProcessRow, 0, len(cmds))
	for _, c := range cmds {
		if n, _ := h.settleCommand(ctx, c); n != nil {
			c = n
		}
		state := ProcessState(c)
		if !opts.All && state == StateExited {
			continue
		}
		env := envs[c.EnvID]
		if env == nil {
			env, _ = h.reg.Env(ctx, c.EnvID)
			envs[c.EnvID] = env
		}
		row := ProcessRow{
			ID: c.ID, Env: c.EnvID, Purpose: c.Purpose, Labels: c.Labels, Argv: c.Argv,
			StdoutPath: c.StdoutPath, StderrPath: c.StderrPath, State: state,
			Tier: c.Tier, CreatedAt: c.CreatedAt, ExitCode: c.ExitCode, Signal: c.Signal,
			StopReason: c.StopReason,
		}
		if row.Labels == nil {
			row.Labels = map[string]string{}
		}
		if c.Workload != nil && state == StateAlive {
			row.PID = c.Workload.PID
		}
		if env != nil {
			row.DeadlineAt = env.DeadlineAt
		}
		row.Stoppable = state != StateExited && canStop(c)
		rows = append(rows, row)
	}
	return rows, nil
}

// ProcessState maps a record to alive / exited / unverified.
func ProcessState(c *registry.Command) string {
	switch {
	case c.Terminal() || c.TreeState == registry.Exited:
		return StateExited
	case c.TreeState == registry.Live:
		return StateAlive
	case c.State == registry.CmdReserved:
		return StateAlive // launching: its launcher is alive
	}
	return StateUnverified
}

// canStop reports whether this user can stop the tree: root, or the owner
// of its cgroup (cgroup2 tier) or of its guardian (subreaper tier).
func canStop(c *registry.Command) bool {
	if os.Geteuid() == 0 {
		return true
	}
	if c.CgroupPath != "" {
		return unix.Access(filepath.Join(c.CgroupPath, "workload", "cgroup.kill"), unix.W_OK) == nil
	}
	if c.Guardian == nil {
		return false
	}
	var st unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(c.Guardian.PID), &st) != nil {
		return false
	}
	return int(st.Uid) == os.Geteuid()
}

// EnvStatus is everything recorded about an environment.
type EnvStatus struct {
	*registry.Env
	// OwnerAlive is the creating process's liveness (alive, gone,
	// unverified).
	OwnerAlive string `json:"owner_alive"`
	// Expired is true once the deadline has passed.
	Expired bool `json:"expired"`
	// LimitsNow is the kernel's counters for the environment's budget,
	// read now (nil once the groups are gone; see limit_evidence).
	LimitsNow *limits.Evidence    `json:"limits_now,omitempty"`
	Commands  []*registry.Command `json:"commands"`
}

// Status resolves id (env or command, unique prefix) and returns its
// settled record: exactly one of env and cmd is set.
func (h *Host) Status(ctx context.Context, idPrefix string) (env *EnvStatus, cmd *registry.Command, err error) {
	kind, id, err := h.reg.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, nil, err
	}
	if kind == "command" {
		c, err := h.Command(ctx, id)
		return nil, c, err
	}
	e, err := h.reg.Env(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{EnvID: id})
	if err != nil {
		return nil, nil, err
	}
	for i, c := range cmds {
		if n, _ := h.settleCommand(ctx, c); n != nil {
			cmds[i] = n
		}
	}
	st := &EnvStatus{Env: e, Commands: cmds, OwnerAlive: linux.Assess(linuxIdentity(e.Owner)).String()}
	if g := limitGroup(e); g != nil && (e.State == registry.EnvActive || e.State == registry.EnvStopping) {
		ev := g.Evidence()
		st.LimitsNow = &ev
	}
	if e.DeadlineMono > 0 {
		boot, _ := linux.BootID()
		st.Expired = e.BootID != boot || linux.MonotonicNow() >= e.DeadlineMono
	}
	return st, nil, nil
}
