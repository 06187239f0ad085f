package supervise

import (
	"encoding/json"
	"time"
)

// Descriptor numbers in the guardian (ExtraFiles start at 3).
const (
	fdControl = 3 // launcher → guardian: release, signal, stop; EOF = owner gone
	fdEvents  = 4 // guardian → launcher: JSON lines
	fdReceipt = 5 // the proof/receipt file, opened by the launcher (O_EXCL)
	fdStdin   = 6
	fdStdout  = 7
	fdStderr  = 8
	fdFwdOut  = 9 // pipe mode: forward copies of stdout to the launcher
	fdFwdErr  = 10
)

// Output modes.
const (
	OutputFiles   = "files"
	OutputPipe    = "pipe"
	OutputInherit = "inherit"
)

// Owner-exit policies.
const (
	OwnerExitStop   = "stop"
	OwnerExitDetach = "detach"
)

// Stop reasons recorded in receipts and results.
const (
	ReasonUser      = "user"
	ReasonDeadline  = "deadline"
	ReasonIdle      = "idle"
	ReasonOwnerExit = "owner-exit"
	ReasonLimit     = "limit"
)

// Config is what the guardian receives at release.
type Config struct {
	CommandID string   `json:"command_id"`
	EnvID     string   `json:"env_id"`
	Argv      []string `json:"argv"`
	Path      string   `json:"path"` // resolved executable
	Env       []string `json:"env"`
	Cwd       string   `json:"cwd,omitempty"`
	Output    string   `json:"output"`
	// WorkloadCgroup is the cgroup2 directory the workload is cloned into;
	// empty in the subreaper tier.
	WorkloadCgroup string `json:"workload_cgroup,omitempty"`
	// DeadlineMono is the force-stop time on CLOCK_MONOTONIC (0: none);
	// graceful termination starts Grace earlier.
	DeadlineMono time.Duration `json:"deadline_mono_ns,omitempty"`
	Grace        time.Duration `json:"grace_ns"`
	OwnerExit    string        `json:"owner_exit"`
	// Foreground makes the workload the terminal's foreground process group
	// (inherit mode on a terminal).
	Foreground bool `json:"foreground,omitempty"`
	// ViewPID, when set, is the keeper whose mount namespace the workload
	// joins before exec.
	ViewPID int `json:"view_pid,omitempty"`
}

// control messages, launcher → guardian.
type controlMsg struct {
	Op     string  `json:"op"` // release | signal | stop
	Config *Config `json:"config,omitempty"`
	Signal int     `json:"signal,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// Event is one guardian → launcher message.
type Event struct {
	Kind      string    `json:"ev"` // started | exec-failed | leader | tree
	PID       int       `json:"pid,omitempty"`
	StartTime uint64    `json:"start,omitempty"`
	ExitCode  *int      `json:"code,omitempty"`
	Signal    *int      `json:"signal,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Error     string    `json:"error,omitempty"`
	At        time.Time `json:"at"`
}

// Receipt is the guardian's durable record, written through fdReceipt.
// It grows as the command progresses; Complete is set only after the
// kernel reported that the guardian has no children left (ECHILD).
type Receipt struct {
	CommandID string `json:"command_id"`
	EnvID     string `json:"env_id"`
	BootID    string `json:"boot_id"`
	Guardian  int    `json:"guardian_pid"`
	ProofDev  uint64 `json:"proof_dev"`
	ProofIno  uint64 `json:"proof_ino"`

	WorkloadPID   int        `json:"workload_pid,omitempty"`
	WorkloadStart uint64     `json:"workload_start,omitempty"`
	StartError    string     `json:"start_error,omitempty"`
	LeaderExited  *time.Time `json:"leader_exited_at,omitempty"`
	ExitCode      *int       `json:"exit_code,omitempty"`
	Signal        *int       `json:"signal,omitempty"`
	StopReason    string     `json:"stop_reason,omitempty"`
	TreeExited    *time.Time `json:"tree_exited_at,omitempty"`
	Complete      bool       `json:"complete"`
}

func marshalLine(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}
