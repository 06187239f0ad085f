package api

import "time"

// Wait reasons: why a wait returned (WaitOutcome.Reason).
const (
	// OutcomeLeader: the leader exited (a plain wait).
	OutcomeLeader = "leader"
	// OutcomeTree: the whole tree is gone and recorded (a plain wait for the
	// tree).
	OutcomeTree = "tree"
	// OutcomeMatch: the output matched the pattern.
	OutcomeMatch = "match"
	// OutcomeStalled: the command wrote nothing for the stall duration.
	OutcomeStalled = "stalled"
	// OutcomeEnded: the command's tree ended before the output matched or
	// stalled; the record says how it ended.
	OutcomeEnded = "ended"
)

// Match is where a command's output matched a pattern.
type Match struct {
	// Stream is stdout or stderr.
	Stream string `json:"stream"`
	// Offset is the byte offset of the match's first byte in the stream.
	Offset int64 `json:"offset"`
	// Text is what the pattern matched.
	Text string `json:"text"`
	// Line is the line that holds the match, without its newline (a line
	// not ended yet is matched as far as it was written).
	Line string `json:"line"`
	// LineOffset is the byte offset of the line's first byte.
	LineOffset int64 `json:"line_offset"`
	// Next is the offset after the line (after its newline): the offset to
	// search on from (since) for the next occurrence.
	Next int64 `json:"next"`
}

// WaitOutcome is what a wait returned: why, and the command's record
// then. The record's fields are its own (embedded): an outcome is a
// command record with reason, match and quiet_since added, so a reader of
// records reads it as one.
type WaitOutcome struct {
	// Reason is leader, tree, match, stalled or ended (the tree ended
	// before the output matched or stalled).
	Reason string `json:"reason"`
	// Match is set for reason match.
	Match *Match `json:"match,omitempty"`
	// QuietSince is, for reason stalled, when the command last wrote
	// output (the newest modification time of its output files).
	QuietSince *time.Time `json:"quiet_since,omitempty"`
	// Command is the command's record when the wait returned.
	Command
}
