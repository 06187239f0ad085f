package hostfork

import (
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/spec"
)

// Records and their parts (package api).
type (
	// EnvRecord is the record of an environment.
	EnvRecord = api.Env
	// CommandRecord is the record of a command tree.
	CommandRecord = api.Command
	Identity      = api.Identity
	Tree          = api.Tree
	Baseline      = api.Baseline
	StreamCapture = api.StreamCapture
	Duration      = api.Duration
)

// States and reasons (package api).
type (
	EnvState     = api.EnvState
	CommandState = api.CommandState
	Phase        = api.Phase
	Liveness     = api.Liveness
	StopReason   = api.StopReason
	Tier         = api.Tier
	OutputMode   = api.OutputMode
)

// Events, filters and reports (package api).
type (
	Event          = api.Event
	EventKind      = api.EventKind
	EventCount     = api.EventCount
	Selector       = api.Selector
	EnvFilter      = api.EnvFilter
	CommandFilter  = api.CommandFilter
	ReapReport     = api.ReapReport
	ReapAction     = api.ReapAction
	ReapPending    = api.ReapPending
	GCReport       = api.GCReport
	GCItem         = api.GCItem
	ExportResult   = api.ExportResult
	Usage          = api.Usage
	PoolUsage      = api.PoolUsage
	BtrfsSize      = api.BtrfsSize
	CapacityReport = api.CapacityReport
	Capacity       = api.Capacity
	LiveWorkload   = api.LiveWorkload
	Sample         = api.Sample
	Reservation    = api.Reservation
	CaptureResult  = api.CaptureResult
	StreamResult   = api.StreamResult
	CaptureOutput  = api.CaptureOutput
	CapturedStream = api.CapturedStream
	Capabilities   = api.Capabilities
	Config         = api.StoreConfig
	Retention      = api.Retention
	Match          = api.Match
	WaitOutcome    = api.WaitOutcome
)

// Plans (package spec).
type (
	// Plan is a request resolved against this host (Host.Plan).
	Plan         = spec.Plan
	PlannedTree  = spec.PlannedTree
	PlannedLimit = spec.PlannedLimit
	ViewPlan     = spec.ViewPlan
	ViewRule     = spec.ViewRule
)

// Environment states.
const (
	EnvCreating = api.EnvCreating
	EnvActive   = api.EnvActive
	EnvStopping = api.EnvStopping
	EnvStopped  = api.EnvStopped
	EnvFailed   = api.EnvFailed
)

// Command record states.
const (
	CommandReserved   = api.CommandReserved
	CommandRunning    = api.CommandRunning
	CommandExited     = api.CommandExited
	CommandFailed     = api.CommandFailed
	CommandUnverified = api.CommandUnverified
)

// Phases of a command's leader and tree.
const (
	PhasePending    = api.PhasePending
	PhaseLive       = api.PhaseLive
	PhaseExited     = api.PhaseExited
	PhaseUnverified = api.PhaseUnverified
	PhaseUnknown    = api.PhaseUnknown
)

// Liveness values (ps: "is it alive").
const (
	Alive      = api.Alive
	Exited     = api.Exited
	Unverified = api.Unverified
)

// Stop reasons.
const (
	ReasonUser       = api.ReasonUser
	ReasonDeadline   = api.ReasonDeadline
	ReasonTimeout    = api.ReasonTimeout
	ReasonIdle       = api.ReasonIdle
	ReasonOwnerExit  = api.ReasonOwnerExit
	ReasonCancelled  = api.ReasonCancelled
	ReasonCompleted  = api.ReasonCompleted
	ReasonKeeperLost = api.ReasonKeeperLost
	ReasonReboot     = api.ReasonReboot
	ReasonAbandoned  = api.ReasonAbandoned
	ReasonLimit      = api.ReasonLimit
)

// Ownership tiers.
const (
	TierSystemdScope = api.TierSystemdScope
	TierCgroup2      = api.TierCgroup2
	TierSubreaper    = api.TierSubreaper
)

// Output modes.
const (
	OutputFiles   = api.OutputFiles
	OutputPipe    = api.OutputPipe
	OutputInherit = api.OutputInherit
)

// Owner-exit policies.
const (
	OwnerExitStop   = api.OwnerExitStop
	OwnerExitDetach = api.OwnerExitDetach
)

// Tree states.
const (
	TreeAllocated = api.TreeAllocated
	TreeRemoved   = api.TreeRemoved
)

// Baseline kinds (Baseline.Kind).
const (
	BaselineSubvolume = planner.BaselineSubvolume
	BaselineDirectory = planner.BaselineDirectory
)

// Export labels.
const (
	ExportComplete = api.ExportComplete
	ExportLive     = api.ExportLive
	ExportPartial  = api.ExportPartial
	// ExportCommitted: a worktree tree was committed, nothing copied.
	ExportCommitted = api.ExportCommitted
	ExportFailed    = api.ExportFailed
)

// Capture states of a stream.
const (
	CaptureComplete   = "complete"
	CaptureIncomplete = "incomplete"
	CaptureFailed     = "failed"
)

// Event kinds.
const (
	EventEnvCreated         = api.EventEnvCreated
	EventEnvFailed          = api.EventEnvFailed
	EventEnvStopDecided     = api.EventEnvStopDecided
	EventEnvStopped         = api.EventEnvStopped
	EventCommandStarted     = api.EventCommandStarted
	EventCommandFailed      = api.EventCommandFailed
	EventCommandLeaderExit  = api.EventCommandLeaderExit
	EventCommandTreeExit    = api.EventCommandTreeExit
	EventCommandUnverified  = api.EventCommandUnverified
	EventCommandStopDecided = api.EventCommandStopDecided
	EventDeadline           = api.EventDeadline
	EventIdle               = api.EventIdle
	EventOOM                = api.EventOOM
	EventReap               = api.EventReap
	EventGC                 = api.EventGC
)

// WorkloadAgent marks a command as an agent workload: it takes part in
// admission.
const WorkloadAgent = "agent"

// Admission modes of an agent workload.
const (
	AdmitWait = "wait"
	AdmitFail = "fail"
	AdmitSkip = "skip"
)

// MaxCapture is the most output kept in memory per stream for a caller
// that takes the output back (Command.Capture). The artifact files keep
// everything.
const MaxCapture = 16 << 20

// ParseSelector splits "k1=v1,k2" into a label selector.
func ParseSelector(s string) (Selector, error) { return api.ParseSelector(s) }

// Why a wait for output returned (WaitOutcome.Reason).
const (
	OutcomeLeader  = api.OutcomeLeader
	OutcomeTree    = api.OutcomeTree
	OutcomeMatch   = api.OutcomeMatch
	OutcomeStalled = api.OutcomeStalled
	OutcomeEnded   = api.OutcomeEnded
)
