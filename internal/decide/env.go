package decide

import (
	"cmp"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// EnvFacts is what was gathered about an environment, now.
type EnvFacts struct {
	NowMono time.Duration // CLOCK_MONOTONIC now
	BootID  string
	Owner   Liveness
	// Keeper is the recorded keeper's liveness (only read when one is
	// recorded).
	Keeper Liveness
	// Commands are its commands, each already settled from its evidence.
	Commands []api.Command
	// Decided is a stop reason found in the environment's run directory:
	// a stop that was carried out but could not be recorded.
	Decided api.StopReason
	// GroupGone: the environment's own cgroup (cgroup2 tier), which only
	// a stop removes, no longer exists.
	GroupGone bool
}

// EnvAction is what an environment's reconciliation must do.
type EnvAction struct {
	// Stop: the environment must stop, with Reason.
	Stop   bool
	Reason api.StopReason
	// Quiet: no command of it runs any more, so the stop is bookkeeping
	// only (nothing to signal).
	Quiet bool
	// AbandonCreation: a creation whose creator is gone; what it made is
	// removed and the environment recorded failed.
	AbandonCreation bool
	// Pending says why nothing can be decided now.
	Pending string
	// Due is a one-line description for readers ("stop: deadline passed").
	Due string
}

// Env decides an environment's reconciliation from facts (DESIGN.md, "the
// reaper"; issue: every reader computes what it can prove now).
func Env(e api.Env, f EnvFacts) EnvAction {
	otherBoot := e.BootID != "" && e.BootID != f.BootID
	quiet := true
	for _, c := range f.Commands {
		if !c.Final() {
			quiet = false
		}
	}
	switch e.State {
	case api.EnvStopped, api.EnvFailed:
		return EnvAction{}
	case api.EnvCreating:
		if !otherBoot && f.Owner == Alive {
			return EnvAction{Pending: "its creator is still running"}
		}
		if !otherBoot && f.Owner == Unverified {
			return EnvAction{Pending: "its creator's liveness is unverified"}
		}
		return EnvAction{AbandonCreation: true, Due: "abandon: its creator exited before it was active"}
	case api.EnvStopping:
		r := cmp.Or(e.StopReason, api.ReasonUser)
		return EnvAction{Stop: true, Reason: r, Quiet: quiet, Due: "stop: " + string(r) + " (interrupted)"}
	}
	stop := func(r api.StopReason, why string) EnvAction {
		return EnvAction{Stop: true, Reason: r, Quiet: quiet, Due: "stop: " + why}
	}
	switch {
	case otherBoot:
		if e.DeadlineMono > 0 {
			return stop(api.ReasonDeadline, "the host rebooted (deadline)")
		}
		return stop(api.ReasonReboot, "the host rebooted")
	case f.Decided != "":
		// A kept decision outweighs a deadline that passed since: the
		// stop came first (issue 39, item 6).
		return stop(f.Decided, fmt.Sprintf("%s (decided, not yet recorded)", f.Decided))
	case e.DeadlineMono > 0 && f.NowMono >= e.DeadlineMono-e.Grace.D():
		// The deadline's stop begins a grace before it (SIGTERM, then
		// the kill at the deadline): a keeper or tree gone from then on
		// went to the deadline.
		return stop(api.ReasonDeadline, "deadline passed")
	case e.OwnerExit == api.OwnerExitStop && f.Owner == Gone:
		return stop(api.ReasonOwnerExit, "its owner exited")
	case e.Keeper != nil && f.Keeper == Gone:
		return stop(api.ReasonKeeperLost, "its keeper is gone")
	case e.AutoStop && len(f.Commands) > 0 && quiet:
		return stop(api.ReasonCompleted, "its command's tree exited")
	case f.GroupGone && e.Tier == api.TierCgroup2:
		// Last: nothing else explains it. A stop removed its group but
		// could record neither the state nor the decision (a full
		// store): it is stopped, why is unknown. (A reader's quiet stop
		// removes the group before it records, so a reason that explains
		// the stop comes first.)
		return stop(api.ReasonUnknown, "its group was removed by a stop whose decision could not be recorded")
	}
	return EnvAction{}
}
