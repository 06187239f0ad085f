package decide

import (
	"cmp"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// Liveness is what is known of a recorded process now.
type Liveness int

// Process liveness.
const (
	Unverified Liveness = iota // the evidence proves neither
	Alive                      // the recorded process exists now
	Gone                       // it no longer exists (or the boot changed)
)

// Receipt is what a command's guardian wrote in its receipt, verified
// against the registered proof file.
type Receipt struct {
	WorkloadPID       int
	WorkloadStart     uint64
	StartError        string
	LeaderExited      *time.Time
	ExitCode          *int
	Signal            *int
	StopReason        api.StopReason
	StoppedByHostfork bool
	OutsideCgroup     int
	TreeExited        *time.Time
	OutputTruncated   bool
	// LeaderOOM: whether the OOM killer took the leader (nil: not known).
	LeaderOOM *bool
	// LeaderOOMStaleMS: the guardian can't tell whether the OOM killer
	// took the leader (supervise.Receipt.LeaderOOMStaleMS): its last
	// sample of the counter was this old when it first saw the leader
	// dying, or it could not read the counter, or never kept a sample.
	LeaderOOMStaleMS int64
	// LastInput and LastOutput: a session's last activity.
	LastInput, LastOutput *time.Time
	Complete              bool
}

// Group is what a cgroup says.
type Group int

// Cgroup evidence.
const (
	GroupNone      Group = iota // no cgroup (subreaper tier) or not read
	GroupPopulated              // it has processes
	GroupEmpty                  // populated 0, or the group is gone
)

// Evidence is everything gathered about one command, now.
type Evidence struct {
	Now time.Time
	// BootID is this boot; a record of another boot's lifetime ended.
	BootID   string
	Receipt  *Receipt // nil: none readable
	Guardian Liveness
	Launcher Liveness
	Workload Group // the workload cgroup, read after the guardian was found gone
	// While the guardian lives, a receipt is only its claim (the file can
	// be rewritten in place by whoever can write the store): its workload
	// identity is taken once WorkloadVerified (the process is alive with
	// that identity and is the guardian's child or in the command's
	// cgroup, or the guardian said so over its control channel), and its
	// leader facts once LeaderGone (the recorded workload no longer exists,
	// or the guardian reported the exit over its channel). Once the
	// guardian is gone, its last receipt is final and wins.
	WorkloadVerified bool
	LeaderGone       bool
	// OOM, when known, is whether the command's own OOM-kill counter
	// shows a kill; OOMEvidence says which counter.
	OOM         *bool
	OOMEvidence string
	// Unnamed: the receipt is not at its path in the command's directory.
	// A launch that registers its guardian in its reservation names the
	// receipt and output files there before the release (decision 56), so
	// with the guardian gone this proves the release never came: nothing
	// of the command ran and its output files were never made.
	Unnamed bool
	// Unreleased: the receipt is at its path and empty. A guardian writes
	// its receipt once as soon as it is released, before it starts
	// anything, and ends at its gate without writing when a stop comes
	// first; so with the guardian gone this proves that nothing of the
	// command ran (its output files exist, empty).
	Unreleased bool
	// StopDecision is a stop's reason kept beside the command's evidence
	// (its stop-decision file) by a stopper, before it signalled.
	StopDecision api.StopReason
	// StuckGuardianKilled: a stop found the guardian stopped (SIGSTOP),
	// every child of it a zombie and no survivor, and killed it. A
	// subreaper's live descendants are its children or theirs, so that
	// proves the tree ended (issue 39, item 7).
	StuckGuardianKilled bool
}

// Command decides what c's record becomes given ev. It returns the new
// record and whether it differs. A final record never changes.
//
// The rules: a receipt's leader facts are taken as soon as they are there;
// its "complete" (the tree is gone) only once the guardian is gone, since
// only the guardian can know it and a receipt can't vouch for a live
// guardian. A guardian that is alive means the tree is live. A guardian
// gone without a complete receipt: another boot proves the former lifetime
// ended; anything else is unverified, an empty cgroup included (it can't
// vouch for members that moved themselves out of it).
func Command(c api.Command, ev Evidence) (api.Command, bool) {
	if c.Final() {
		return c, false
	}
	n := c
	now := ev.Now.UTC()
	if r := ev.Receipt; r != nil {
		mergeLeader(&n, r, ev)
	}
	if n.Guardian == nil {
		if n.State == api.CommandReserved && ev.Launcher == Gone {
			// Never registered: the launch did not get past its
			// reservation (the registration is durable before the
			// release, so it survives any crash, the host's too).
			neverReleased(&n, "never released", now)
		}
		return n, !same(c, n)
	}
	switch ev.Guardian {
	case Alive:
		n.TreeState = api.PhaseLive
		if n.State == api.CommandUnverified {
			n.State = api.CommandRunning
		}
		return n, !same(c, n)
	case Unverified:
		n.TreeState = api.PhaseUnverified
		return n, !same(c, n)
	}
	// The guardian is gone: its receipt can no longer change.
	if n.LeaderState == api.PhaseLive && ev.LeaderGone {
		// The recorded leader no longer exists, and nothing will report
		// its exit: it ended, its status unobserved (issue 39, item 9).
		n.LeaderState = api.PhaseExited
	}
	if r := ev.Receipt; r != nil && r.Complete {
		n.TreeState = api.PhaseExited
		n.TreeExitedAt = r.TreeExited
		n.TreeEvidence = "guardian receipt (no children left)"
		n.StopReason = cmp.Or(n.StopReason, r.StopReason)
		n.State = api.CommandExited
		if r.StartError != "" {
			n.State = api.CommandFailed
		}
		finishOOM(&n, ev)
		return n, !same(c, n)
	}
	if ev.Unreleased && ev.Receipt == nil {
		neverReleased(&n, "never released (its receipt is empty)", now)
		n.StopReason = cmp.Or(n.StopReason, ev.StopDecision)
		if n.StopReason != "" {
			// A stop reached the guardian at its gate: hostfork ended the
			// command before it started.
			n.StoppedByHostfork = true
			n.Error = "stopped before it started: nothing of it ran"
		}
		return n, !same(c, n)
	}
	if ev.Unnamed && ev.Receipt == nil {
		neverReleased(&n, "never released (its files were never named)", now)
		n.StdoutPath, n.StderrPath = "", ""
		return n, !same(c, n)
	}
	if n.Guardian.BootID != ev.BootID {
		// A different boot proves the whole former lifetime ended; no PID
		// is looked at or signalled.
		n.TreeState = api.PhaseExited
		n.TreeEvidence = "boot id changed"
		n.TreeExitedAt = &now
		if n.LeaderState != api.PhaseExited {
			n.LeaderState = api.PhaseUnknown
		}
		n.State = api.CommandExited
		return n, !same(c, n)
	}
	if ev.StuckGuardianKilled && ev.Workload != GroupPopulated {
		n.TreeState = api.PhaseExited
		n.TreeEvidence = "its guardian was stopped with only zombie children left; hostfork killed it"
		n.TreeExitedAt = &now
		if n.LeaderState != api.PhaseExited {
			n.LeaderState = api.PhaseExited // a zombie: ended, its status unobserved
		}
		n.State = api.CommandExited
		finishOOM(&n, ev)
		return n, !same(c, n)
	}
	switch ev.Workload {
	case GroupEmpty:
		// Not proof: the guardian was the only witness of members that
		// moved themselves out of the cgroup (issue 39, item 5).
		n.TreeState = api.PhaseUnverified
		n.TreeEvidence = "cgroup empty, but the guardian was lost without a receipt: a process that moved itself out of the cgroup would not be seen"
		n.State = api.CommandUnverified
	case GroupPopulated:
		n.TreeState = api.PhaseLive
		n.TreeEvidence = "cgroup populated (guardian lost)"
	default:
		n.TreeState = api.PhaseUnverified
		n.TreeEvidence = "guardian lost without a receipt; no cgroup to prove the tree's exit"
		n.State = api.CommandUnverified
	}
	return n, !same(c, n)
}

// neverReleased records a launch interrupted before its release: nothing
// of it ran.
func neverReleased(n *api.Command, evidence string, now time.Time) {
	n.State = api.CommandFailed
	n.Error = "launch interrupted before release"
	n.LeaderState = api.PhaseUnknown
	n.TreeState = api.PhaseExited
	n.TreeEvidence = evidence
	n.TreeExitedAt = &now
}

// mergeLeader applies a receipt's facts about the workload and its leader,
// as far as ev lets them be believed (see Evidence).
func mergeLeader(n *api.Command, r *Receipt, ev Evidence) {
	final := ev.Guardian == Gone
	if r.WorkloadPID != 0 && n.Workload == nil && (ev.WorkloadVerified || final) {
		b := ev.BootID
		if n.Guardian != nil {
			b = n.Guardian.BootID
		}
		n.Workload = &api.Identity{BootID: b, PID: r.WorkloadPID, StartTime: r.WorkloadStart}
	}
	if r.StartError != "" && n.Error == "" && (ev.LeaderGone || final) {
		n.Error = r.StartError
	}
	if n.StopReason == "" && r.StopReason != "" {
		n.StopReason = r.StopReason
	}
	if r.OutputTruncated {
		n.OutputTruncated = true
	}
	if r.LastInput != nil {
		n.LastInputAt = r.LastInput
	}
	if r.LastOutput != nil {
		n.LastOutputAt = r.LastOutput
	}
	switch {
	case r.LeaderExited != nil && (n.LeaderState != api.PhaseExited || final) && (ev.LeaderGone || final):
		// The guardian's last receipt overrides what an earlier read
		// believed.
		n.LeaderState = api.PhaseExited
		n.LeaderExitedAt = r.LeaderExited
		n.ExitCode, n.Signal = r.ExitCode, r.Signal
		n.StoppedByHostfork = r.StoppedByHostfork
	case r.LeaderExited == nil && n.Workload != nil && n.LeaderState != api.PhaseExited:
		n.LeaderState = api.PhaseLive
	}
	if n.StartedAt == nil && n.Workload != nil {
		// The registration time stands in when the record has none.
		n.StartedAt = &n.CreatedAt
	}
}

func finishOOM(n *api.Command, ev Evidence) {
	// The guardian sampled but can't tell who the OOM killer took.
	unsure := ev.Receipt != nil && ev.Receipt.LeaderOOM == nil && ev.Receipt.LeaderOOMStaleMS > 0
	if n.OOM == nil && ev.OOM != nil {
		v := *ev.OOM
		n.OOM = &v
		n.OOMEvidence = ev.OOMEvidence
		if v && unsure {
			n.OOMEvidence += fmt.Sprintf("; whether it took the leader, which died of SIGKILL, is unknown: the guardian's last sample of the counter was %d ms old when it first saw the leader dying (it samples every 10 ms while it gets the CPU)", ev.Receipt.LeaderOOMStaleMS)
		}
	} else if n.OOM == nil && ev.OOMEvidence != "" {
		n.OOMEvidence = ev.OOMEvidence
	}
	// A leader dead of SIGKILL while the command's own OOM counter rose
	// went to the environment's memory budget: hostfork's limit ended it
	// (unless a stop reason came first).
	// The guardian's sampling decides when it could (LeaderOOM), and says
	// when it couldn't (unsure: nothing is attributed); without it, a
	// SIGKILL while the counter rose is taken for the OOM kill.
	leaderOOM := ev.Receipt == nil || (ev.Receipt.LeaderOOM == nil && !unsure) || (ev.Receipt.LeaderOOM != nil && *ev.Receipt.LeaderOOM)
	if n.OOM == nil || !*n.OOM || n.Signal == nil || *n.Signal != 9 || !leaderOOM {
		return
	}
	// The guardian saw the OOM killer take the leader before any stop
	// had begun: that came first, whatever a later stop of the leftovers
	// (owner exit) recorded.
	proven := ev.Receipt != nil && ev.Receipt.LeaderOOM != nil && !ev.Receipt.StoppedByHostfork
	if n.StopReason == "" || proven {
		n.StopReason = api.ReasonLimit
		n.StoppedByHostfork = true
	}
}

func same(a, b api.Command) bool {
	return a.State == b.State && a.LeaderState == b.LeaderState && a.TreeState == b.TreeState &&
		a.TreeEvidence == b.TreeEvidence && a.StopReason == b.StopReason && a.Error == b.Error &&
		eqInt(a.ExitCode, b.ExitCode) && eqInt(a.Signal, b.Signal) && eqBool(a.OOM, b.OOM) &&
		a.OOMEvidence == b.OOMEvidence && (a.Workload == nil) == (b.Workload == nil) &&
		a.StoppedByHostfork == b.StoppedByHostfork && a.OutputTruncated == b.OutputTruncated && eqTime(a.LeaderExitedAt, b.LeaderExitedAt) &&
		eqTime(a.TreeExitedAt, b.TreeExitedAt) && eqTime(a.StartedAt, b.StartedAt) &&
		eqTime(a.LastInputAt, b.LastInputAt) && eqTime(a.LastOutputAt, b.LastOutputAt)
}

func eqInt(a, b *int) bool   { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqBool(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// Liveness maps a record to what ps answers: alive, exited or unverified.
func LivenessOf(c *api.Command) api.Liveness {
	switch {
	case c.Final() || c.TreeState == api.PhaseExited:
		return api.Exited
	case c.TreeState == api.PhaseLive:
		return api.Alive
	case c.State == api.CommandReserved:
		return api.Alive // launching: its launcher is alive
	case c.State == api.CommandRunning && c.TreeState == api.PhasePending:
		// Released, its workload not yet reported by the guardian, which
		// settlement found alive (a gone or unverifiable guardian settles
		// the tree's state).
		return api.Alive
	}
	return api.Unverified
}

// StopReason is the reason a stop records: the first one wins — the
// recorded one, else the one the guardian received first (its receipt),
// else the stopper's own.
func StopReason(recorded, receipt, mine api.StopReason) api.StopReason {
	switch {
	case recorded != "":
		return recorded
	case receipt != "":
		return receipt
	}
	return mine
}
