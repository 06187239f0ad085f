package api

// EnvState is an environment's recorded lifecycle state.
type EnvState string

// Environment states.
const (
	// EnvCreating: reserved; its resources may be half-made.
	EnvCreating EnvState = "creating"
	// EnvActive: it takes commands until its deadline.
	EnvActive EnvState = "active"
	// EnvStopping: a stop was decided (admission closed); its trees are
	// being stopped.
	EnvStopping EnvState = "stopping"
	// EnvStopped: execution stop confirmed; files (trees, evidence) remain.
	EnvStopped EnvState = "stopped"
	// EnvFailed: creation failed; its intents say what still exists.
	EnvFailed EnvState = "failed"
)

// Final reports whether the state is one an environment never leaves.
func (s EnvState) Final() bool { return s == EnvStopped || s == EnvFailed }

// CommandState is a command record's lifecycle state ("record_state").
type CommandState string

// Command record states.
const (
	// CommandReserved: registered; its guardian is not yet released.
	CommandReserved CommandState = "reserved"
	// CommandRunning: released; its tree may be live.
	CommandRunning CommandState = "running"
	// CommandExited: its tree's exit was observed; the record is final.
	CommandExited CommandState = "exited"
	// CommandFailed: it never ran (the launch was aborted or exec failed);
	// the record is final.
	CommandFailed CommandState = "failed"
	// CommandUnverified: neither the tree's liveness nor its exit can be
	// proven; evidence and capacity are kept until it can.
	CommandUnverified CommandState = "unverified"
)

// Final reports whether the record is final.
func (s CommandState) Final() bool { return s == CommandExited || s == CommandFailed }

// Phase is the state of a command's leader ("leader_state") or of its whole
// tree ("tree_state").
type Phase string

// Phases.
const (
	PhasePending    Phase = "pending"    // not started yet
	PhaseLive       Phase = "live"       // running
	PhaseExited     Phase = "exited"     // its exit was observed
	PhaseUnverified Phase = "unverified" // can't be proven either way
	PhaseUnknown    Phase = "unknown"    // it happened, but was not observed
)

// Liveness answers "is it alive" for ps ("state"): alive, exited or
// unverified.
type Liveness string

// Liveness values.
const (
	Alive      Liveness = "alive"
	Exited     Liveness = "exited"
	Unverified Liveness = "unverified"
)

// StopReason says why hostfork stopped a tree or an environment. The first
// reason recorded wins.
type StopReason string

// Stop reasons.
const (
	ReasonUser       StopReason = "user"        // someone asked (hostfork stop, StopTree, Env.Stop)
	ReasonDeadline   StopReason = "deadline"    // the environment's max runtime ended
	ReasonTimeout    StopReason = "timeout"     // the command's own timeout ended
	ReasonIdle       StopReason = "idle"        // no activity for the idle timeout
	ReasonOwnerExit  StopReason = "owner-exit"  // the owning process exited (owner-exit stop)
	ReasonCancelled  StopReason = "cancelled"   // the context the command was started with ended
	ReasonCompleted  StopReason = "completed"   // the run's leader exited; what it left behind was stopped
	ReasonKeeperLost StopReason = "keeper-lost" // the keeper holding the view is gone
	ReasonReboot     StopReason = "reboot"      // the host rebooted; nothing was signalled
	ReasonAbandoned  StopReason = "abandoned"   // an operator released an unverified tree (stop --abandon)
	ReasonLimit      StopReason = "limit"       // a resource limit ended it
	// ReasonUnknown: hostfork stopped it (its groups are gone), but the
	// decision could not be recorded (a full store) and nothing says why.
	ReasonUnknown StopReason = "unknown"
)

// EndedByHostfork reports whether the reason means hostfork ended the
// command (a foreground run then exits 124, as timeout(1) does).
func (r StopReason) EndedByHostfork() bool {
	switch r {
	case "", ReasonCompleted, ReasonReboot:
		return false
	}
	return true
}

// Tier is an ownership tier (DESIGN.md, "Ownership tiers").
type Tier string

// Ownership tiers, strongest first.
const (
	TierSystemdScope Tier = "systemd-scope"
	TierCgroup2      Tier = "cgroup2"
	TierSubreaper    Tier = "subreaper"
)

// OutputMode says where a command's output goes.
type OutputMode string

// Output modes.
const (
	// OutputFiles writes straight to owned log files (survives the reader).
	OutputFiles OutputMode = "files"
	// OutputPipe also streams the output to the caller while writing files.
	OutputPipe OutputMode = "pipe"
	// OutputInherit hands the workload the caller's descriptors; no files.
	OutputInherit OutputMode = "inherit"
)

// Owner-exit policies: what happens to an environment or command when the
// process that created it exits.
const (
	OwnerExitStop   = "stop"
	OwnerExitDetach = "detach"
)
