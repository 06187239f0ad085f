package api

import (
	"encoding/json"
	"time"
)

// Identity names one process across PID reuse and reboots: the boot id,
// the PID and the start time (/proc/PID/stat field 22, clock ticks since
// boot).
type Identity struct {
	BootID    string `json:"boot_id"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// Tree states.
const (
	TreeAllocated = "allocated"
	TreeRemoved   = "removed"
)

// Tree is one private tree of an environment.
type Tree struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // btrfs | overlay | copy
	Baseline string `json:"baseline,omitempty"`
	Source   string `json:"source"`
	// HostPath is where the tree's own files are on the host (the
	// snapshot or copy directory; an overlay's upper directory).
	HostPath string `json:"host_path"`
	// WorkloadPath is the path the workload uses inside the view.
	WorkloadPath string `json:"workload_path"`
	// Storage is the storage backend's identity record.
	Storage json.RawMessage `json:"storage,omitempty"`
	State   string          `json:"state"` // allocated | removed
	Note    string          `json:"note,omitempty"`
}

// Env is the record of one environment: what the registry holds, plus what
// a reader could prove about it when it read it (the fields marked
// "computed").
type Env struct {
	ID        string            `json:"id"`
	Rev       int64             `json:"rev"`
	State     EnvState          `json:"state"`
	CreatedAt time.Time         `json:"created_at"`
	BootID    string            `json:"boot_id"`
	Purpose   string            `json:"purpose"`
	Labels    map[string]string `json:"labels"`
	Tier      Tier              `json:"tier"`
	// CgroupPath is the environment's cgroup2 group (cgroup2 and
	// systemd-scope tiers).
	CgroupPath  string `json:"cgroup_path,omitempty"`
	CgroupInode uint64 `json:"cgroup_inode,omitempty"`
	RunDir      string `json:"run_dir"`

	// Lifetime.
	OwnerExit    string    `json:"owner_exit"` // stop | detach
	Owner        *Identity `json:"owner"`
	UntilStopped bool      `json:"until_stopped"`
	// AutoStop: the environment stops when the trees of all its commands
	// have exited (an environment made by run).
	AutoStop    bool       `json:"auto_stop"`
	TTL         Duration   `json:"ttl"`
	Grace       Duration   `json:"grace"`
	IdleTimeout Duration   `json:"idle_timeout"`
	ActivatedAt *time.Time `json:"activated_at"`
	DeadlineAt  *time.Time `json:"deadline_at"`
	// Spec is the request the environment was created from; explicit
	// environment variable values are redacted unless asked for.
	Spec json.RawMessage `json:"spec,omitempty"`

	// The view: trees, keeper and planned rules.
	Trees  []Tree          `json:"trees"`
	Keeper *Identity       `json:"keeper"`
	View   json.RawMessage `json:"view,omitempty"`
	// Limits is the limit groups' record (mechanisms and group paths);
	// LimitEvidence the kernel's counters read at the confirmed stop.
	Limits        json.RawMessage `json:"limits,omitempty"`
	LimitEvidence *LimitsEvidence `json:"limit_evidence,omitempty"`
	// Unit is the transient systemd scope (systemd-scope tier),
	// ScopeMembership how its first process was handed over, and
	// ManagerResult the manager's result when it stopped.
	Unit            string `json:"unit,omitempty"`
	ScopeMembership string `json:"scope_membership,omitempty"`
	ManagerResult   string `json:"manager_result,omitempty"`

	// Stop.
	StopReason      StopReason `json:"stop_reason"`
	StopRequestedAt *time.Time `json:"stop_requested_at"`
	StoppedAt       *time.Time `json:"stopped_at"`
	// Abandoned lists what an explicit stop --abandon gave up on.
	Abandoned     []string `json:"abandoned,omitempty"`
	CleanupErrors []string `json:"cleanup_errors"`
	Error         string   `json:"error"`

	// Computed by the reader.
	//
	// OwnerAlive is the owner's liveness now: alive, gone or unverified.
	OwnerAlive string `json:"owner_alive"`
	// Expired is true once the deadline has passed.
	Expired bool `json:"expired"`
	// Due says what the evidence shows must happen although the record
	// does not say so yet (e.g. "stop: deadline passed"); "" when nothing.
	Due string `json:"due"`
	// LimitsNow is the kernel's counters for the environment's budget,
	// read now (absent once its groups are gone; see limit_evidence).
	LimitsNow *LimitsEvidence `json:"limits_now,omitempty"`
	// Commands are the environment's commands, oldest first.
	Commands []Command `json:"commands"`

	// Clock readings on CLOCK_MONOTONIC of the environment's boot: when
	// it was activated and when its deadline falls (0: none). Internal
	// evidence; DeadlineAt is the same instant in UTC.
	ActivatedMono time.Duration `json:"-"`
	DeadlineMono  time.Duration `json:"-"`
}

// StreamCapture is what was captured of one output stream.
type StreamCapture struct {
	State string `json:"state"` // complete | incomplete | failed
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
}

// Command is the record of one command tree.
type Command struct {
	ID         string            `json:"id"`
	Env        string            `json:"env"`
	Rev        int64             `json:"rev"`
	State      CommandState      `json:"record_state"`
	CreatedAt  time.Time         `json:"created_at"`
	Purpose    string            `json:"purpose"`
	Labels     map[string]string `json:"labels"`
	Argv       []string          `json:"argv"`
	Cwd        string            `json:"cwd"`
	Output     OutputMode        `json:"output"`
	Dir        string            `json:"dir"`
	StdoutPath string            `json:"stdout_path"`
	StderrPath string            `json:"stderr_path"`

	// EnvPolicy is the launch environment policy applied ("" when the
	// caller gave the environment explicitly); EnvPolicyNote says when it
	// could not be followed. EnvKeys names the variables set explicitly
	// (their values are kept out of records and listings).
	EnvPolicy     string   `json:"env_policy"`
	EnvPolicyNote string   `json:"env_policy_note,omitempty"`
	EnvKeys       []string `json:"env_keys"`

	Tier        Tier       `json:"tier"`
	Launcher    *Identity  `json:"launcher"`
	CgroupPath  string     `json:"cgroup_path,omitempty"`
	CgroupInode uint64     `json:"cgroup_inode,omitempty"`
	Guardian    *Identity  `json:"guardian"`
	ProofDev    uint64     `json:"proof_dev,omitempty"`
	ProofIno    uint64     `json:"proof_ino,omitempty"`
	Workload    *Identity  `json:"workload"`
	StartedAt   *time.Time `json:"started_at"`
	// Timeout is the command's own timeout (0s: none); it never extends
	// the environment's deadline.
	Timeout Duration `json:"timeout"`

	// The result.
	ExitCode       *int       `json:"exit_code"`
	Signal         *int       `json:"signal"`
	LeaderState    Phase      `json:"leader_state"`
	LeaderExitedAt *time.Time `json:"leader_exited_at"`
	TreeState      Phase      `json:"tree_state"`
	TreeExitedAt   *time.Time `json:"tree_exited_at"`
	TreeEvidence   string     `json:"tree_evidence"`
	StopReason     StopReason `json:"stop_reason"`
	// StoppedByHostfork: the leader exited after hostfork decided to stop
	// the tree (so its status is not its own doing).
	StoppedByHostfork bool `json:"stopped_by_hostfork"`
	// OOM is true when the kernel OOM-killed a process of this command,
	// false when its counter proves it did not, null when unknown.
	OOM         *bool  `json:"oom"`
	OOMEvidence string `json:"oom_evidence"`
	// Survivors are processes of the tree that a stop could not end, or
	// that can't be accounted for (tree_state unverified).
	Survivors []Identity `json:"survivors,omitempty"`
	// OutputTruncated says the artifact files may be shorter than the
	// output because the store's filesystem was full: a write to them
	// failed (pipe mode: each file is then the exact prefix written
	// before), or the filesystem had less than 128 KiB left when the tree
	// exited (files mode, where the workload writes them itself and got
	// the error).
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// LimitsNote says when limits were accepted unenforced.
	LimitsNote string `json:"limits_note,omitempty"`
	// Session is "tty" (a pseudo-terminal held by the guardian) or
	// "stdin" (a stdin pipe held by the guardian), "" without one
	// (docs/sessions.md). LastInputAt and LastOutputAt are the session's
	// last input (typed text, sent data, resizes) and output, as its
	// guardian recorded them (at most a second late while it runs).
	Session      string     `json:"session,omitempty"`
	LastInputAt  *time.Time `json:"last_input_at,omitempty"`
	LastOutputAt *time.Time `json:"last_output_at,omitempty"`

	WorkloadKind  string                   `json:"workload_kind,omitempty"`
	Admission     string                   `json:"admission,omitempty"`
	Capture       map[string]StreamCapture `json:"capture"`
	CleanupErrors []string                 `json:"cleanup_errors"`
	Error         string                   `json:"error"`

	// Computed by the reader.
	//
	// Liveness answers "is it alive" (ps): alive, exited or unverified.
	Liveness Liveness `json:"state"`
	// Stoppable is true when this user can stop the tree now.
	Stoppable bool `json:"stoppable"`
	// PID is the leader's PID while the leader lives.
	PID *int `json:"pid"`
	// DeadlineAt is the environment's deadline, or the command's timeout
	// if it comes first.
	DeadlineAt *time.Time `json:"deadline_at"`

	// OOMBaseline is the OOM-kill counter the command's evidence started
	// from. Internal evidence.
	OOMBaseline *uint64 `json:"-"`
	// TimeoutMono is the command's force-stop time on CLOCK_MONOTONIC.
	TimeoutMono time.Duration `json:"-"`
}

// Final reports whether the command's record is final.
func (c *Command) Final() bool { return c.State.Final() }

// ExitStatus is the shell-style status of the leader: its exit code, or
// 128+signal. ok is false while the leader's status is unknown.
func (c *Command) ExitStatus() (status int, ok bool) {
	switch {
	case c.ExitCode != nil:
		return *c.ExitCode, true
	case c.Signal != nil:
		return 128 + *c.Signal, true
	}
	return 0, false
}

// Baseline is a registered, prepared source for private trees.
type Baseline struct {
	Name      string    `json:"name"`
	Rev       int64     `json:"rev"`
	Path      string    `json:"path"`
	Kind      string    `json:"kind"` // btrfs-subvolume | directory
	Device    uint64    `json:"device"`
	Inode     uint64    `json:"inode"`
	FSType    string    `json:"fs_type"`
	Offers    []string  `json:"offers"`
	Notes     []string  `json:"notes,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}
