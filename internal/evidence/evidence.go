package evidence

import (
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
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/tree"
)

// Receipt reads and verifies a command's receipt (nil: none readable).
func Receipt(c *api.Command) *decide.Receipt {
	r, _ := ReceiptOf(c)
	return r
}

// ReceiptOf is readReceipt with the reason there is none (os.ErrNotExist,
// supervise.ErrNoReceipt, ...).
func ReceiptOf(c *api.Command) (*decide.Receipt, error) {
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

// Gather gathers what can be known about command c now (DESIGN.md: each
// assessment rechecks current evidence; nothing is cached).
func Gather(env *api.Env, c *api.Command) decide.Evidence {
	boot, _ := linux.BootID()
	ev := decide.Evidence{Now: time.Now(), BootID: boot}
	ev.Receipt = Receipt(c)
	if c.Guardian == nil {
		ev.Launcher = records.Liveness(c.Launcher)
		return ev
	}
	ev.Guardian = records.Liveness(c.Guardian)
	if ev.Guardian == decide.Alive {
		verifyLeader(c, &ev)
	}
	if ev.Guardian == decide.Gone {
		if c.Workload != nil {
			ev.LeaderGone = records.Liveness(c.Workload) == decide.Gone
		}
		// Gone: its receipt can no longer change; the read above may
		// predate its last writes.
		var err error
		ev.Receipt, err = ReceiptOf(c)
		if ev.Receipt == nil && c.ProofIno != 0 {
			switch {
			case errors.Is(err, os.ErrNotExist):
				ev.Unnamed = true
			case errors.Is(err, supervise.ErrNoReceipt):
				ev.Unreleased = true
				ev.StopDecision = records.ReadDecision(filepath.Join(c.Dir, "stop-decision"))
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
		OOM(env, c, LimitGroup(env), &ev)
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
		ev.LeaderGone = records.Liveness(c.Workload) == decide.Gone
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

// OOM reads the command's own OOM-kill counter (its v1 memory
// group, or its cgroup2 group's memory.events): OOM is true when the
// kernel killed a process of it, false when the counter proves it did not,
// and unknown when it can't be read — never inferred from a signal.
func OOM(env *api.Env, c *api.Command, g *limits.Group, ev *decide.Evidence) {
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

// LimitGroup is the environment's recorded limit group (nil: none).
func LimitGroup(env *api.Env) *limits.Group {
	if env == nil || len(env.Limits) == 0 {
		return nil
	}
	var g limits.Group
	if json.Unmarshal(env.Limits, &g) != nil {
		return nil
	}
	return &g
}

// Unenforced says which of an environment's requested limits are not
// enforced (accepted with --allow-weaker): the run says so at its start and
// the record keeps it.
func Unenforced(env *api.Env) string {
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
	g := LimitGroup(env)
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

// Target is the tree-stop target of a command; its guardian is a root
// only when guardianProven.
func Target(env *api.Env, c *api.Command) tree.Target {
	t := tree.Target{Cgroup: c.CgroupPath}
	if t.Cgroup != "" {
		if m, err := cgroup.FindMount(); err == nil {
			t.Mount = m.Path
		}
	}
	alive := c.Guardian != nil && linux.Assess(records.ToLinux(c.Guardian)) == linux.Alive
	if alive && GuardianProven(env, c) == nil {
		// A guardian makes itself its tree's subreaper before anything
		// starts, or exits.
		t.Roots, t.Subreapers = []linux.Identity{records.ToLinux(c.Guardian)}, true
	} else if !alive && c.Workload != nil && WorkloadProven(c) == nil {
		// No guardian is left to be the tree's root: its leader, still
		// the process its guardian recorded, is stopped with its
		// descendants (issue 39, item 8).
		t.Leaders = []linux.Identity{records.ToLinux(c.Workload)}
	}
	return t
}

// WorkloadProven says whether the record's workload is the one its
// guardian recorded in its receipt (registered by inode): a record alone
// never names a process to signal.
func WorkloadProven(c *api.Command) error {
	r, err := ReceiptOf(c)
	if err != nil {
		return err
	}
	if r.WorkloadPID != c.Workload.PID || r.WorkloadStart != c.Workload.StartTime || (c.Guardian != nil && c.Guardian.BootID != c.Workload.BootID) {
		return fmt.Errorf("the record's workload (pid %d) is not the one its guardian's receipt names (pid %d)", c.Workload.PID, r.WorkloadPID)
	}
	return nil
}

// GuardianProven says whether the live process the record names as the
// command's guardian is hostfork's guardian of it, not merely a process
// with the same PID and start time (a record can be edited): in the cgroup
// tiers it must be in its environment's guardians group, where only
// guardians are started; without a cgroup, the guardian's own receipt
// (registered by inode) must name it. Nothing is signalled or treated as a
// tree's root without this proof.
func GuardianProven(env *api.Env, c *api.Command) error {
	if c.Guardian == nil {
		return errors.New("no guardian is recorded")
	}
	if env != nil && env.CgroupPath != "" && c.CgroupPath != "" {
		m, err := cgroup.FindMount()
		if err != nil {
			return fmt.Errorf("the cgroup2 mount can't be found: %v", err)
		}
		if !tree.InGroup(c.Guardian.PID, m.Path, filepath.Join(env.CgroupPath, records.GuardiansGroup)) {
			return fmt.Errorf("pid %d is not in the environment's guardians group", c.Guardian.PID)
		}
		return nil
	}
	return GuardianMatchesReceipt(c)
}

// GuardianMatchesReceipt checks the recorded guardian against the receipt
// the guardian itself wrote through its registered proof file.
func GuardianMatchesReceipt(c *api.Command) error {
	if c.ProofIno == 0 {
		return errors.New("no receipt was registered")
	}
	r, err := supervise.ReadReceipt(filepath.Join(c.Dir, "receipt"), c.ID, c.ProofDev, c.ProofIno)
	if err != nil {
		return fmt.Errorf("its receipt can't vouch for it: %w", err)
	}
	if r.Guardian != c.Guardian.PID || r.BootID != c.Guardian.BootID {
		return fmt.Errorf("the record names pid %d but the guardian's receipt names pid %d", c.Guardian.PID, r.Guardian)
	}
	return nil
}
