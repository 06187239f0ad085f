package api

import "time"

// EventKind names what an event records.
type EventKind string

// Event kinds. Every event is written in the same registry transaction as
// the change it reports, so a consumer that resumes from the last sequence
// it saw misses nothing and sees nothing twice.
const (
	EventEnvCreated         EventKind = "env.created"           // an environment became active
	EventEnvFailed          EventKind = "env.failed"            // its creation failed
	EventEnvStopDecided     EventKind = "env.stop_decided"      // a stop was decided (Reason)
	EventEnvStopped         EventKind = "env.stopped"           // its stop was confirmed
	EventEnvDeadlineMoved   EventKind = "env.deadline_moved"    // its deadline was moved (Detail: "from OLD to NEW", RFC 3339)
	EventCommandStarted     EventKind = "command.started"       // the guardian was registered and released
	EventCommandFailed      EventKind = "command.failed"        // it never ran (Detail says why)
	EventCommandLeaderExit  EventKind = "command.leader_exited" // the leader's exit was observed (ExitCode or Signal)
	EventCommandTreeExit    EventKind = "command.tree_exited"   // the whole tree's exit was observed
	EventCommandUnverified  EventKind = "command.unverified"    // its tree can no longer be verified
	EventCommandStopDecided EventKind = "command.stop_decided"  // a stop of its tree was decided (Reason)
	EventDeadline           EventKind = "deadline"              // a deadline or timeout ended a tree or an environment
	EventIdle               EventKind = "idle"                  // an idle timeout ended a tree
	EventOOM                EventKind = "oom"                   // the kernel OOM-killed a process of a command
	EventReap               EventKind = "reap"                  // the reaper did something (Detail)
	EventGC                 EventKind = "gc"                    // retention deleted something (Detail)
)

// Event is one entry of the registry's durable, numbered event log.
type Event struct {
	// Seq numbers events in commit order, from 1, without reuse.
	Seq int64 `json:"seq"`
	// At is when it happened, as observed (the leader's exit time, the
	// stop decision's time); RecordedAt when it was committed.
	At         time.Time  `json:"at"`
	RecordedAt time.Time  `json:"recorded_at"`
	Kind       EventKind  `json:"kind"`
	Env        string     `json:"env"`
	Command    string     `json:"command,omitempty"`
	Reason     StopReason `json:"reason,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Signal     *int       `json:"signal,omitempty"`
	Detail     string     `json:"detail,omitempty"`
}

// EventCount is how many events of one kind and reason a store has
// recorded since it was made. Counts never go down: they are written with
// the events, and retention deletes records, not counts.
type EventCount struct {
	Kind   EventKind  `json:"kind"`
	Reason StopReason `json:"reason,omitempty"`
	Count  int64      `json:"count"`
}
