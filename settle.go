package hostfork

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
)

func inodeOf(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// assessment is what the evidence says about one command now. Each call
// re-reads current evidence; nothing is cached between assessments.
func (h *Host) assess(c *registry.Command) (*registry.Command, bool) {
	n := *c
	if n.Terminal() {
		return &n, false
	}
	changed := false
	var rcpt *supervise.Receipt
	if n.ProofIno != 0 {
		r, err := supervise.ReadReceipt(filepath.Join(n.Dir, "receipt"), n.ID, n.ProofDev, n.ProofIno)
		if err == nil {
			rcpt = r
		}
	}
	if rcpt != nil {
		changed = mergeReceipt(&n, rcpt) || changed
		if n.Terminal() {
			return &n, changed
		}
	}
	boot, _ := linux.BootID()
	// A guardian never recorded: the launch never got past registration.
	if n.Guardian == nil {
		if n.State == registry.CmdReserved && linux.Assess(linuxIdentity(n.Launcher)) == linux.Gone {
			n.State = registry.CmdFailed
			n.Error = "launch interrupted before release"
			n.LeaderState = registry.Unknown
			n.TreeState = registry.Exited
			n.TreeEvidence = "never released"
			return &n, true
		}
		return &n, changed
	}
	switch linux.Assess(linuxIdentity(n.Guardian)) {
	case linux.Alive:
		state := registry.Live
		if n.TreeState != state {
			n.TreeState = state
			changed = true
		}
		return &n, changed
	case linux.Unverified:
		if n.TreeState != registry.Unverified {
			n.TreeState = registry.Unverified
			changed = true
		}
		return &n, changed
	}
	// The guardian is gone, so its receipt can no longer change: read it
	// again. The read above may predate the guardian's last writes (the
	// leader's exit, the tree's exit); concluding "guardian lost" from it
	// would drop the recorded result.
	if n.ProofIno != 0 {
		if r, err := supervise.ReadReceipt(filepath.Join(n.Dir, "receipt"), n.ID, n.ProofDev, n.ProofIno); err == nil {
			changed = mergeReceipt(&n, r) || changed
			if n.Terminal() {
				return &n, changed
			}
		}
	}
	// The guardian is gone without a complete receipt.
	now := time.Now().UTC()
	if n.Guardian.BootID != boot {
		// A different boot proves the whole former lifetime ended; no PID
		// is looked at or signalled.
		n.TreeState = registry.Exited
		n.TreeEvidence = "boot id changed"
		n.TreeExitedAt = &now
		if n.LeaderState != registry.Exited {
			n.LeaderState = registry.Unknown
		}
		n.State = registry.CmdExited
		return &n, true
	}
	if n.CgroupPath != "" {
		wl := cgroup.Open(filepath.Join(n.CgroupPath, "workload"))
		ev, err := wl.Events()
		if errors.Is(err, os.ErrNotExist) || (err == nil && !ev.Populated) {
			n.TreeState = registry.Exited
			n.TreeEvidence = "cgroup empty (guardian lost)"
			n.TreeExitedAt = &now
			if n.LeaderState != registry.Exited {
				n.LeaderState = registry.Unknown
			}
			n.State = registry.CmdExited
			return &n, true
		}
		if err == nil && ev.Populated {
			if n.TreeState != registry.Live {
				n.TreeState = registry.Live
				changed = true
			}
			return &n, changed
		}
	}
	if n.TreeState != registry.Unverified {
		n.TreeState = registry.Unverified
		n.State = registry.CmdUnknown
		changed = true
	}
	return &n, changed
}

// mergeReceipt applies a verified receipt's facts to a record.
func mergeReceipt(n *registry.Command, r *supervise.Receipt) bool {
	changed := false
	if r.WorkloadPID != 0 && n.Workload == nil {
		n.Workload = &registry.Identity{BootID: r.BootID, PID: r.WorkloadPID, StartTime: r.WorkloadStart}
		changed = true
	}
	if r.StartError != "" && n.Error == "" {
		n.Error = r.StartError
		changed = true
	}
	if r.LeaderExited != nil && n.LeaderState != registry.Exited {
		n.LeaderState = registry.Exited
		n.LeaderExitedAt = r.LeaderExited
		n.ExitCode = r.ExitCode
		n.Signal = r.Signal
		changed = true
	} else if r.LeaderExited == nil && r.WorkloadPID != 0 && n.LeaderState != registry.Live {
		n.LeaderState = registry.Live
		changed = true
	}
	if r.Complete {
		n.TreeState = registry.Exited
		n.TreeExitedAt = r.TreeExited
		n.TreeEvidence = "guardian receipt (no children left)"
		if n.StopReason == "" {
			n.StopReason = r.StopReason
		}
		n.State = registry.CmdExited
		if r.StartError != "" {
			n.State = registry.CmdFailed
		}
		changed = true
	} else if n.TreeState != registry.Live {
		n.TreeState = registry.Live
		changed = true
	}
	return changed
}

// settleCommand assesses c and, if the facts changed, writes them with a
// compare-and-set. On a conflict it re-reads and assesses the newer record,
// so a newer decision is never rolled back.
func (h *Host) settleCommand(ctx context.Context, c *registry.Command) (*registry.Command, error) {
	cur := c
	for try := 0; try < 5; try++ {
		n, changed := h.assess(cur)
		if changed && n.Terminal() && n.OOM == nil {
			h.oomEvidence(ctx, n)
		}
		if !changed {
			return n, nil
		}
		err := h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.UpdateCommand(n) })
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, registry.ErrConflict) {
			// Recording failed (e.g. disk full): report the observation
			// anyway; the receipt stays the durable evidence.
			return n, err
		}
		if cur, err = h.reg.Command(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	return cur, registry.ErrConflict
}

// Command reads and settles one command record.
func (h *Host) Command(ctx context.Context, id string) (*registry.Command, error) {
	c, err := h.reg.Command(ctx, id)
	if err != nil {
		return nil, err
	}
	n, err := h.settleCommand(ctx, c)
	if n == nil {
		return c, err
	}
	return n, nil
}

func assessIdentity(boot string, pid int, start uint64) string {
	return linux.Assess(linux.Identity{BootID: boot, PID: pid, StartTime: start}).String()
}

// oomEvidence sets OOM from the kernel's counters: true when the
// environment's OOM-kill counter rose during the command's life, false when
// it provably did not, and unknown (nil) when the evidence can't be read —
// never inferred from a signal.
func (h *Host) oomEvidence(ctx context.Context, n *registry.Command) {
	e, err := h.reg.Env(ctx, n.EnvID)
	if err != nil || len(e.Limits) == 0 {
		return
	}
	now, ok := oomCount(e)
	if !ok || n.OOMBaseline == nil {
		n.OOMEvidence = "the kernel's OOM counters could not be read when the tree exit was observed"
		return
	}
	v := now > *n.OOMBaseline
	n.OOM = &v
	n.OOMEvidence = fmt.Sprintf("environment oom_kill counter %d at start, %d after the tree exited", *n.OOMBaseline, now)
}
