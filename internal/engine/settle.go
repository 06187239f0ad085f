package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/tree"
)

// readReceipt reads and verifies a command's receipt (nil: none readable).
func readReceipt(c *api.Command) *decide.Receipt {
	r, _ := receiptOf(c)
	return r
}

// receiptOf is readReceipt with the reason there is none (os.ErrNotExist,
// supervise.ErrNoReceipt, ...).
func receiptOf(c *api.Command) (*decide.Receipt, error) {
	if c.ProofIno == 0 {
		return nil, errNoProof
	}
	r, err := supervise.ReadReceipt(filepath.Join(c.Dir, "receipt"), c.ID, c.ProofDev, c.ProofIno)
	if err != nil {
		return nil, err
	}
	return &decide.Receipt{
		WorkloadPID: r.WorkloadPID, WorkloadStart: r.WorkloadStart, StartError: r.StartError,
		LeaderExited: r.LeaderExited, ExitCode: r.ExitCode, Signal: r.Signal, StopReason: r.StopReason,
		StoppedByHostfork: r.StoppedByHostfork, OutsideCgroup: r.OutsideCgroup, TreeExited: r.TreeExited,
		OutputTruncated: r.OutputTruncated, LeaderOOM: r.LeaderOOM, LeaderOOMStaleMS: r.LeaderOOMStaleMS, Complete: r.Complete,
		LastInput: r.LastInputAt, LastOutput: r.LastOutputAt,
	}, nil
}

// errNoProof: the record names no receipt (no proof file registered).
var errNoProof = errors.New("no receipt registered")

// evidence gathers what can be known about command c now (DESIGN.md: each
// assessment rechecks current evidence; nothing is cached).
func (e *Engine) evidence(env *api.Env, c *api.Command) decide.Evidence {
	boot, _ := linux.BootID()
	ev := decide.Evidence{Now: time.Now(), BootID: boot}
	ev.Receipt = readReceipt(c)
	if c.Guardian == nil {
		ev.Launcher = liveness(c.Launcher)
		return ev
	}
	ev.Guardian = liveness(c.Guardian)
	if ev.Guardian == decide.Alive {
		verifyLeader(c, &ev)
	}
	if ev.Guardian == decide.Gone {
		if c.Workload != nil {
			ev.LeaderGone = liveness(c.Workload) == decide.Gone
		}
		// Gone: its receipt can no longer change; the read above may
		// predate its last writes.
		var err error
		ev.Receipt, err = receiptOf(c)
		if ev.Receipt == nil && c.ProofIno != 0 {
			switch {
			case errors.Is(err, os.ErrNotExist):
				ev.Unnamed = true
			case errors.Is(err, supervise.ErrNoReceipt):
				ev.Unreleased = true
				ev.StopDecision = readDecision(filepath.Join(c.Dir, "stop-decision"))
			}
		}
		if (ev.Receipt == nil || !ev.Receipt.Complete) && c.CgroupPath != "" {
			g := cgroup.Open(c.CgroupPath)
			evs, err := g.Events()
			switch {
			case errors.Is(err, os.ErrNotExist), err == nil && !evs.Populated:
				ev.Workload = decide.GroupEmpty
			case err == nil:
				ev.Workload = decide.GroupPopulated
			}
		}
		e.oomEvidence(env, c, limitGroup(env), &ev)
	}
	return ev
}

// verifyLeader checks a live guardian's claims about its workload against
// the kernel (decide.Evidence: WorkloadVerified, LeaderGone): a workload
// identity is believed when that process is alive and is the guardian's
// child or in the command's cgroup; a leader exit when the recorded
// workload no longer exists.
func verifyLeader(c *api.Command, ev *decide.Evidence) {
	if c.Workload != nil {
		ev.LeaderGone = liveness(c.Workload) == decide.Gone
		return
	}
	r := ev.Receipt
	if r == nil || r.WorkloadPID <= 0 || c.Guardian == nil {
		return
	}
	id := linux.Identity{BootID: c.Guardian.BootID, PID: r.WorkloadPID, StartTime: r.WorkloadStart}
	if linux.Assess(id) != linux.Alive {
		return
	}
	st, err := linux.ReadStat(r.WorkloadPID)
	if err != nil || st.StartTime != r.WorkloadStart {
		return
	}
	if st.PPID == c.Guardian.PID {
		ev.WorkloadVerified = true
		return
	}
	if c.CgroupPath != "" {
		if m, err := cgroup.FindMount(); err == nil && tree.InGroup(r.WorkloadPID, m.Path, c.CgroupPath) {
			ev.WorkloadVerified = true
		}
	}
}

// oomEvidence reads the command's own OOM-kill counter (its v1 memory
// group, or its cgroup2 group's memory.events): OOM is true when the
// kernel killed a process of it, false when the counter proves it did not,
// and unknown when it can't be read — never inferred from a signal.
func (e *Engine) oomEvidence(env *api.Env, c *api.Command, g *limits.Group, ev *decide.Evidence) {
	if g == nil || c.OOMBaseline == nil {
		return
	}
	n := g.CommandOOMKills(c.ID, c.CgroupPath)
	if n == nil {
		ev.OOMEvidence = "the command's OOM counter could not be read when its tree exit was observed"
		return
	}
	v := *n > *c.OOMBaseline
	ev.OOM = &v
	ev.OOMEvidence = fmt.Sprintf("the command's own oom_kill counter was %d at start, %d after its tree exited", *c.OOMBaseline, *n)
}

func limitGroup(env *api.Env) *limits.Group {
	if env == nil || len(env.Limits) == 0 {
		return nil
	}
	var g limits.Group
	if json.Unmarshal(env.Limits, &g) != nil {
		return nil
	}
	return &g
}

// unenforcedOf says which of an environment's requested limits are not
// enforced (accepted with --allow-weaker): the run says so at its start and
// the record keeps it.
func unenforcedOf(env *api.Env) string {
	var s struct {
		Limits struct {
			Memory      any     `json:"memory"`
			CPUs        float64 `json:"cpus"`
			Pids        int64   `json:"pids"`
			AllowWeaker bool    `json:"allow_weaker"`
		} `json:"limits"`
	}
	if len(env.Spec) == 0 || json.Unmarshal(env.Spec, &s) != nil || !s.Limits.AllowWeaker {
		return ""
	}
	g := limitGroup(env)
	var missing []string
	has := func(r limits.Resource) bool { return g != nil && g.Mechanisms[r] != "" }
	if s.Limits.Memory != nil && s.Limits.Memory != "0" && !has(limits.Memory) {
		missing = append(missing, "memory")
	}
	if s.Limits.CPUs > 0 && !has(limits.CPU) {
		missing = append(missing, "cpus")
	}
	if s.Limits.Pids > 0 && !has(limits.Pids) {
		missing = append(missing, "pids")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("NOT enforced on this host (accepted with --allow-weaker): %v", missing)
}

// removeCommandGroups removes a finished command's own cgroups (its
// cgroup2 group, its v1 memory group) and returns what could not be
// removed. A v1 memory group whose OOM-kill counter moved stays until its
// environment ends: cgroup v1 counts a kill in the victim's group only, so
// the environment's limit evidence sums its commands' groups then.
func (e *Engine) removeCommandGroups(ctx context.Context, c *api.Command, g *limits.Group) []string {
	var errs []string
	if c.CgroupPath != "" {
		if err := cgroup.Open(c.CgroupPath).Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err.Error())
		}
	}
	if g != nil && g.Mechanisms[limits.Memory] == limits.Cgroup1 && c.OOM != nil && *c.OOM {
		return errs
	}
	if g != nil {
		if err := g.RemoveCommand(ctx, c.ID); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return errs
}

// commitCommand records n over cur (compare-and-set). A final record
// goes with its command's cgroups removed and its intents settled in the
// same commit (the command's directory stays: it is evidence), and its
// readable snapshot written once committed.
func (e *Engine) commitCommand(ctx context.Context, env *api.Env, cur, n *api.Command) error {
	var b registry.Batch
	if n.Final() {
		n.CleanupErrors = append(append([]string{}, n.CleanupErrors...), e.removeCommandGroups(ctx, n, limitGroup(env))...)
		ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: n.Env, CommandID: n.ID, Open: true})
		override := map[int64]registry.Fact{}
		for _, in := range ins {
			if in.Kind == registry.KindDir {
				override[in.ID] = registry.Fact{Exists: true, Identity: pathIdentity(in.Target)}
			}
		}
		settleAll(&b, ptrs(ins), override)
	}
	b.UpdateCommand(cur, n)
	if err := e.reg.Commit(ctx, &b); err != nil {
		return err
	}
	if n.Final() {
		writeCommandRecord(n)
	}
	return nil
}

// settleCommand assesses c from its evidence and, if the facts changed,
// records them with a compare-and-set (and, for a final record, removes
// its cgroups and settles its intents in the same commit). On a conflict
// it reads the newer record and decides again, so a newer decision is
// never rolled back. A command this process launched is left to its
// watcher. The returned record is what the evidence shows, also when it
// could not be recorded (err says why).
func (e *Engine) settleCommand(ctx context.Context, env *api.Env, c *api.Command) (*api.Command, error) {
	if c.Final() {
		return c, nil
	}
	if r := e.runningOf(c.ID); r != nil {
		rec := r.Record()
		return &rec, nil
	}
	cur := c
	for try := 0; try < 5; try++ {
		ev := e.evidence(env, cur)
		n, changed := decide.Command(*cur, ev)
		if !changed {
			return &n, nil
		}
		err := e.commitCommand(ctx, env, cur, &n)
		if err == nil {
			return &n, nil
		}
		if !errors.Is(err, registry.ErrConflict) {
			// Recording failed (e.g. a full disk): report the observation
			// anyway; the receipt stays the durable evidence.
			return &n, err
		}
		if cur, err = e.reg.Command(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	return cur, registry.ErrConflict
}
