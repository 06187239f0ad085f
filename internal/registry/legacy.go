package registry

import (
	"encoding/json"
	"time"
)

// The v2 row formats (schema version 2): each row was one JSON document in
// a data column. They are read only by migration 3, which rewrites the
// rows in the current format.

type v2Identity struct {
	BootID    string `json:"boot_id"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

type v2Tree struct {
	Name         string          `json:"name"`
	Kind         string          `json:"kind"`
	Baseline     string          `json:"baseline,omitempty"`
	Source       string          `json:"source"`
	HostPath     string          `json:"host_path"`
	WorkloadPath string          `json:"workload_path"`
	Storage      json.RawMessage `json:"storage,omitempty"`
	State        string          `json:"state"`
	Note         string          `json:"note,omitempty"`
}

type v2Env struct {
	ID              string            `json:"id"`
	State           string            `json:"state"`
	CreatedAt       time.Time         `json:"created_at"`
	BootID          string            `json:"boot_id"`
	Purpose         string            `json:"purpose,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Tier            string            `json:"tier"`
	CgroupPath      string            `json:"cgroup_path,omitempty"`
	CgroupInode     uint64            `json:"cgroup_inode,omitempty"`
	RunDir          string            `json:"run_dir"`
	OwnerExit       string            `json:"owner_exit"`
	Owner           *v2Identity       `json:"owner,omitempty"`
	UntilStopped    bool              `json:"until_stopped"`
	TTL             time.Duration     `json:"ttl_ns,omitempty"`
	Grace           time.Duration     `json:"grace_ns"`
	IdleTimeout     time.Duration     `json:"idle_timeout_ns,omitempty"`
	ActivatedMono   time.Duration     `json:"activated_mono_ns,omitempty"`
	DeadlineMono    time.Duration     `json:"deadline_mono_ns,omitempty"`
	DeadlineAt      *time.Time        `json:"deadline_at,omitempty"`
	Spec            json.RawMessage   `json:"spec,omitempty"`
	Trees           []v2Tree          `json:"trees,omitempty"`
	Keeper          *v2Identity       `json:"keeper,omitempty"`
	View            json.RawMessage   `json:"view,omitempty"`
	Limits          json.RawMessage   `json:"limits,omitempty"`
	Unit            string            `json:"unit,omitempty"`
	ScopeMembership string            `json:"scope_membership,omitempty"`
	ManagerResult   string            `json:"manager_result,omitempty"`
	LimitEvidence   json.RawMessage   `json:"limit_evidence,omitempty"`
	StopReason      string            `json:"stop_reason,omitempty"`
	StopRequestedAt *time.Time        `json:"stop_requested_at,omitempty"`
	StoppedAt       *time.Time        `json:"stopped_at,omitempty"`
	CleanupErrors   []string          `json:"cleanup_errors,omitempty"`
	Error           string            `json:"error,omitempty"`
}

type v2StreamCapture struct {
	State string `json:"state"`
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
}

type v2Command struct {
	ID             string                     `json:"id"`
	EnvID          string                     `json:"env"`
	State          string                     `json:"record_state"`
	CreatedAt      time.Time                  `json:"created_at"`
	Purpose        string                     `json:"purpose,omitempty"`
	Labels         map[string]string          `json:"labels,omitempty"`
	Argv           []string                   `json:"argv"`
	Cwd            string                     `json:"cwd,omitempty"`
	Output         string                     `json:"output"`
	Dir            string                     `json:"dir"`
	StdoutPath     string                     `json:"stdout_path,omitempty"`
	StderrPath     string                     `json:"stderr_path,omitempty"`
	EnvPolicy      string                     `json:"env_policy,omitempty"`
	EnvPolicyNote  string                     `json:"env_policy_note,omitempty"`
	Tier           string                     `json:"tier"`
	Launcher       *v2Identity                `json:"launcher,omitempty"`
	CgroupPath     string                     `json:"cgroup_path,omitempty"`
	CgroupInode    uint64                     `json:"cgroup_inode,omitempty"`
	Guardian       *v2Identity                `json:"guardian,omitempty"`
	ProofDev       uint64                     `json:"proof_dev,omitempty"`
	ProofIno       uint64                     `json:"proof_ino,omitempty"`
	Workload       *v2Identity                `json:"workload,omitempty"`
	StartedAt      *time.Time                 `json:"started_at,omitempty"`
	ExitCode       *int                       `json:"exit_code"`
	Signal         *int                       `json:"signal"`
	LeaderState    string                     `json:"leader_state"`
	LeaderExitedAt *time.Time                 `json:"leader_exited_at,omitempty"`
	TreeState      string                     `json:"tree_state"`
	TreeExitedAt   *time.Time                 `json:"tree_exited_at,omitempty"`
	TreeEvidence   string                     `json:"tree_evidence,omitempty"`
	StopReason     string                     `json:"stop_reason,omitempty"`
	OOM            *bool                      `json:"oom"`
	WorkloadKind   string                     `json:"workload_kind,omitempty"`
	Admission      string                     `json:"admission,omitempty"`
	OOMBaseline    *uint64                    `json:"oom_baseline,omitempty"`
	OOMEvidence    string                     `json:"oom_evidence,omitempty"`
	Capture        map[string]v2StreamCapture `json:"capture,omitempty"`
	CleanupErrors  []string                   `json:"cleanup_errors,omitempty"`
	Error          string                     `json:"error,omitempty"`
}
