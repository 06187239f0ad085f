package flow

import (
	"regexp"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
)

// Task queues. Every node worker polls SharedQueue (placement: RunInEnvironment
// workflow tasks and Create, taken only by a node whose admission has a free
// slot) and its own NodeQueue (everything that must run where the environment
// lives).
const (
	SharedQueue     = "hostfork"
	NodeQueuePrefix = "hostfork-node-"
)

// NodeQueue is the task queue of one node.
func NodeQueue(node string) string { return NodeQueuePrefix + node }

var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidNode reports whether name can name a node: it becomes part of a task
// queue name and a label value.
func ValidNode(name string) bool { return nodeName.MatchString(name) }

// Registered names of the workflow and the activities.
const (
	WorkflowRunInEnvironment = "RunInEnvironment"

	ActivityCreate = "Create" // SharedQueue
	ActivityExec   = "Exec"   // NodeQueue
	ActivityStop   = "Stop"   // NodeQueue
	ActivityExport = "Export" // NodeQueue
	ActivityStatus = "Status" // NodeQueue
	ActivityLogs   = "Logs"   // NodeQueue
)

// Labels the worker puts on what it makes. Values of LabelCreate and
// LabelExec are "<workflow run id>/<activity id>": a retried activity finds
// what an earlier attempt of it made by that label.
const (
	LabelCreate   = "temporal.io/create"
	LabelExec     = "temporal.io/exec"
	LabelWorkflow = "temporal.io/workflow-id"
	LabelNode     = "temporal.io/node"
)

// Application error types the activities return (temporal.ApplicationError
// Type()). The first three are non-retryable.
const (
	// ErrInvalid: the request is malformed or asks for what this node
	// can't do (hostfork's ErrInvalid, ErrUnsupported, a missing
	// executable, ...). Retrying can't help.
	ErrInvalid = "InvalidRequest"
	// ErrNotFound: no such environment, command or tree on this node.
	ErrNotFound = "NotFound"
	// ErrEnvLost: the environment is gone or going (its owner, an earlier
	// worker process, exited; its deadline passed; it was stopped). The
	// workflow starts again from Create.
	ErrEnvLost = "EnvironmentLost"
	// ErrExists: an export destination already exists.
	ErrExists = "Exists"
	// ErrNodeRefused: the node took a Create it must not serve (its
	// admission was paused after the task was polled). Retryable: the
	// retry goes back to the shared queue.
	ErrNodeRefused = "NodeRefused"
	// ErrHostfork: any other hostfork error. Retryable.
	ErrHostfork = "HostforkError"
	// ErrAttemptLost: an Exec attempt lost its activity (its heartbeat was
	// refused: the server timed the attempt out or could not be reached).
	// The command keeps running; the retry reattaches to it.
	ErrAttemptLost = "AttemptLost"
)

// CreateRequest asks a node for an environment.
type CreateRequest struct {
	// Spec is the environment. Its owner_exit must be stop (the default):
	// an environment made by a worker ends with that worker. Its
	// max_runtime defaults to the worker's --ttl and may not exceed its
	// --max-ttl; until_stopped is refused.
	Spec spec.Environment `json:"spec"`
}

// CreateResult says where the environment is.
type CreateResult struct {
	Node string `json:"node"`
	Env  string `json:"env"`
	// DeadlineAt is when hostfork force-stops the environment (grace
	// included). Exec's start-to-close timeout never exceeds it.
	DeadlineAt time.Time `json:"deadline_at"`
	// Reused: a retried attempt returned the environment an earlier
	// attempt of the same activity made ("label" or "heartbeat" says how
	// it was found).
	Reused  bool    `json:"reused,omitempty"`
	FoundBy string  `json:"found_by,omitempty"`
	Record  api.Env `json:"record"`
}

// CreateProgress is Create's heartbeat: once the environment exists, it
// names it, so that a retry on another node returns it instead of making a
// second one.
type CreateProgress struct {
	Node string `json:"node,omitempty"`
	Env  string `json:"env,omitempty"`
	// DeadlineAt is the environment's deadline.
	DeadlineAt time.Time `json:"deadline_at"`
}

// Command is one command to run in an environment.
type Command struct {
	Argv []string `json:"argv"`
	// Cwd is the working directory inside the environment's view; "" is
	// the worker's.
	Cwd string `json:"cwd,omitempty"`
	// EnvPolicy is inherit, clean, host-shell or toolchain ("" is the
	// environment's).
	EnvPolicy string `json:"env_policy,omitempty"`
	// EnvSet holds K=V variables set last. hostfork keeps their values
	// out of its records, but they are in the workflow's history: put
	// secrets there only with an encrypting payload codec.
	EnvSet  []string          `json:"env_set,omitempty"`
	Purpose string            `json:"purpose,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Timeout stops the command's tree (reason "timeout") this long after
	// it started; it never extends the environment's deadline.
	Timeout api.Duration `json:"timeout,omitempty"`
}

// ExecRequest runs one command in an environment of this node and waits for
// it.
type ExecRequest struct {
	Env     string  `json:"env"`
	Command Command `json:"command"`
}

// ExecProgress is Exec's heartbeat.
type ExecProgress struct {
	Command     string    `json:"command"`
	LeaderState api.Phase `json:"leader_state"`
	TreeState   api.Phase `json:"tree_state"`
	PID         int       `json:"pid,omitempty"`
	// StdoutBytes and StderrBytes are the sizes of the output artifacts:
	// Logs from these offsets returns what was written since.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// ExecResult is the command's final record. On cancellation it is the
// details of the temporal.CanceledError that Exec returns.
type ExecResult struct {
	Record api.Command `json:"record"`
	// Reattached: a retried attempt found the command an earlier attempt
	// started and waited for it.
	Reattached  bool  `json:"reattached,omitempty"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// StopRequest stops an environment of this node.
type StopRequest struct {
	Env string `json:"env"`
	// Reason is recorded (default "user"); the first recorded reason wins.
	Reason api.StopReason `json:"reason,omitempty"`
	// Grace after SIGTERM; 0 is the environment's.
	Grace api.Duration `json:"grace,omitempty"`
}

// ExportRequest copies one of an environment's trees to a path on its node.
type ExportRequest struct {
	Env  string `json:"env"`
	Tree string `json:"tree"`
	// Dest must not exist; hostfork creates it.
	Dest string `json:"dest"`
}

// StatusRequest reads the record of an environment or a command (id or
// unique prefix) on this node.
type StatusRequest struct {
	ID string `json:"id"`
}

// StatusResult holds exactly one of Env and Command.
type StatusResult struct {
	Env     *api.Env     `json:"env,omitempty"`
	Command *api.Command `json:"command,omitempty"`
}

// MaxLogChunk bounds one Logs answer, well below Temporal's payload limit.
const MaxLogChunk = 1 << 20

// LogsRequest reads a byte range of a command's output artifact.
type LogsRequest struct {
	Command string `json:"command"`
	// Stream is stdout (default) or stderr.
	Stream string `json:"stream,omitempty"`
	Offset int64  `json:"offset"`
	// Limit is the most bytes returned; 0 or more than MaxLogChunk means
	// MaxLogChunk.
	Limit int64 `json:"limit,omitempty"`
}

// LogsResult is the bytes [Offset, Next) of the stream.
type LogsResult struct {
	Data   []byte `json:"data"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	// EOF: the command's tree is gone and Next is the end of the stream.
	EOF bool `json:"eof"`
}
