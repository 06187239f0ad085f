package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// ReapAction is one thing a reap did.
type ReapAction struct {
	Env     string `json:"env"`
	Command string `json:"command,omitempty"`
	Action  string `json:"action"`
	Detail  string `json:"detail,omitempty"`
}

// ReapStopFailed is the action of a stop a reap attempted that did not
// finish; the same item is listed as pending with the reason.
const ReapStopFailed = "stop-failed"

// ReapPending is something a reap could not settle, with the reason.
type ReapPending struct {
	Env    string `json:"env"`
	What   string `json:"what"`
	Reason string `json:"reason"`
}

// ReapReport is the outcome of one reap pass.
type ReapReport struct {
	Checked int           `json:"checked_envs"`
	Actions []ReapAction  `json:"actions"`
	Pending []ReapPending `json:"pending"`
}

// GCItem is one deletion (done or planned) or one hold.
type GCItem struct {
	Env    string `json:"env"`
	What   string `json:"what"` // "tree NAME" | "evidence"
	Path   string `json:"path,omitempty"`
	Reason string `json:"reason"`
	Bytes  int64  `json:"apparent_bytes,omitempty"`
}

// GCReport is the outcome of a gc pass.
type GCReport struct {
	DryRun  bool     `json:"dry_run"`
	Deleted []GCItem `json:"deleted"`
	Held    []GCItem `json:"held"`
	Errors  []GCItem `json:"errors"`
	// Note: deleted Btrfs snapshots free their space in the background;
	// a deletion here is acknowledged, not measured as reclaimed.
	Note string `json:"note,omitempty"`
}

// Export labels.
const (
	// ExportComplete: every file was copied from a stopped environment.
	ExportComplete = "complete"
	// ExportLive: every file was copied, but the environment was running,
	// so the copy is not a consistent point in time.
	ExportLive = "live/inconsistent"
	// ExportPartial: some files could not be copied (listed).
	ExportPartial = "partial"
	// ExportFailed: the export did not produce a usable copy.
	ExportFailed = "failed"
	// ExportCommitted: a worktree tree was committed on its branch
	// (--commit) and nothing was copied.
	ExportCommitted = "committed"
)

// ExportResult is the record of one export, also kept in the
// environment's run directory under exports/.
type ExportResult struct {
	Env    string `json:"env"`
	Tree   string `json:"tree"`
	Kind   string `json:"kind"`
	Dest   string `json:"dest"`
	Label  string `json:"label"`
	Source string `json:"source"`
	// PartialPath is where an export that failed left what it copied
	// (never at Dest).
	PartialPath string   `json:"partial_path,omitempty"`
	Files       int64    `json:"files"`
	Bytes       int64    `json:"bytes"`
	Cloned      int64    `json:"cloned"`
	Failed      int64    `json:"failed"`
	Errors      []string `json:"errors,omitempty"`
	// Note says why a label is weaker than the environment's state
	// suggests (an overlay whose lower changed in place).
	Note string `json:"note,omitempty"`
	// Commit and Branch: what --commit made on a worktree tree's branch
	// (Commit "" when there was nothing to commit).
	Commit     string    `json:"commit,omitempty"`
	Branch     string    `json:"branch,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// PoolUsage is the capacity of one storage root (a filesystem holding the
// store or trees), as statfs reports it.
type PoolUsage struct {
	Path       string `json:"path"`
	FSType     string `json:"fs_type"`
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	Trees      int    `json:"trees"`
}

// Usage is the store's inventory. Sizes are apparent sizes of hostfork's
// own files, never called physical use; a deletion is never called
// reclaimed.
type Usage struct {
	MeasuredAt     time.Time      `json:"measured_at"`
	ActiveEnvs     int            `json:"active_envs"`
	RetainedEnvs   int            `json:"retained_envs"`
	FailedEnvs     int            `json:"failed_envs"`
	LiveCommands   int            `json:"live_commands"`
	UnverifiedCmds int            `json:"unverified_commands"`
	LogBytes       int64          `json:"log_bytes"`
	ExportBytes    int64          `json:"export_bytes"`
	RegistryBytes  int64          `json:"registry_bytes"`
	TreesByKind    map[string]int `json:"trees_by_kind"`
	Pools          []PoolUsage    `json:"pools"`
	// CleanupBacklog counts stopped environments past their tree or
	// evidence retention that gc has not handled; OldestBacklog is how
	// long the oldest has waited.
	CleanupBacklog   int      `json:"cleanup_backlog"`
	OldestBacklog    Duration `json:"oldest_backlog"`
	FailedOperations int      `json:"failed_operations"`
	PendingIntents   int      `json:"pending_intents"`
	// PendingReclamation: Btrfs snapshots deleted whose space the
	// filesystem frees in the background.
	PendingReclamation string `json:"pending_reclamation"`
}

// BtrfsSize is an on-request measurement of one Btrfs tree's extents.
type BtrfsSize struct {
	Env        string    `json:"env"`
	Tree       string    `json:"tree"`
	Path       string    `json:"path"`
	Total      int64     `json:"total_bytes"`
	Exclusive  int64     `json:"exclusive_bytes"`
	Shared     int64     `json:"shared_bytes"`
	MeasuredAt time.Time `json:"measured_at"`
	Error      string    `json:"error,omitempty"`
}

// Sample is one sampled workload tree's memory.
type Sample struct {
	// Bytes is the larger of the two readings.
	Bytes uint64 `json:"bytes"`
	// Complete: every member of the tree could be read, both times.
	Complete bool `json:"complete"`
	// Stable: both readings were complete and within the tolerance.
	Stable bool `json:"stable"`
	// Members is the number of processes read (0 for a cgroup counter).
	Members int `json:"members"`
	// Source names the counter: memory.current, memory.usage_in_bytes,
	// pss, rss.
	Source string `json:"source"`
	// Note says why the sample is incomplete or unstable.
	Note string `json:"note,omitempty"`
}

// Reservation is what one live workload holds in admission.
type Reservation struct {
	ID     string  `json:"id"`
	Bytes  uint64  `json:"bytes"`
	Reason string  `json:"reason"`
	Sample *Sample `json:"sample,omitempty"`
}

// Capacity is the admission computation: slots from cores and available
// memory (70% by default, a 2 GiB floor per workload, at least one slot).
type Capacity struct {
	Cores        int     `json:"cores"`
	MemAvailable *uint64 `json:"mem_available,omitempty"`
	Share        float64 `json:"share"`
	CoreSlots    int     `json:"core_slots"`
	// MemorySlots is nil without memory telemetry.
	MemorySlots  *int          `json:"memory_slots,omitempty"`
	MemoryBudget *uint64       `json:"memory_budget,omitempty"`
	Reserved     uint64        `json:"reserved_bytes"`
	Slots        int           `json:"slots"`
	Used         int           `json:"used"`
	Free         int           `json:"free"`
	Bound        string        `json:"bound"`
	Reservations []Reservation `json:"reservations"`
}

// LiveWorkload is one admitted workload and its sampled tree memory.
type LiveWorkload struct {
	Command string   `json:"command"`
	Env     string   `json:"env"`
	Argv    []string `json:"argv"`
	Sample  *Sample  `json:"sample,omitempty"`
}

// CapacityReport is what `hostfork capacity` shows.
type CapacityReport struct {
	Capacity
	Paused bool           `json:"paused"`
	Live   []LiveWorkload `json:"live"`
	// CPUPressure and MemoryPressure are the host's pressure stall
	// information (/proc/pressure/cpu and memory, "some avg10": the
	// percent of the last 10 s some task waited); nil without PSI.
	CPUPressure    *float64 `json:"cpu_pressure,omitempty"`
	MemoryPressure *float64 `json:"memory_pressure,omitempty"`
}

// StreamResult is one stream of a CaptureResult.
type StreamResult struct {
	// Data is the captured bytes, exactly as written (base64 in JSON).
	Data  []byte `json:"data"`
	State string `json:"state"` // complete | incomplete | failed
	// Bytes counts every byte observed, also those beyond the buffer.
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
	// Artifact is the file that holds the whole stream.
	Artifact string `json:"artifact"`
}

// CaptureResult is a command's result together with its captured output.
type CaptureResult struct {
	Record Command      `json:"record"`
	Stdout StreamResult `json:"stdout"`
	Stderr StreamResult `json:"stderr"`
	// Receipt is the capture receipt written for an incomplete capture.
	Receipt string `json:"receipt,omitempty"`
	// ReceiptError says why that receipt could not be written (a full
	// store): the capture is incomplete and its evidence is missing.
	ReceiptError string `json:"receipt_error,omitempty"`
}

// CaptureOutput is what `hostfork run --capture` prints: the command's
// result, each stream's capture state, and the captured output — as text
// when it is valid UTF-8 (stdout, stderr), else base64 of the exact bytes
// (stdout_base64, stderr_base64). Record is the command's whole record.
type CaptureOutput struct {
	Command      string                    `json:"command"`
	Env          string                    `json:"env"`
	ExitStatus   int                       `json:"exit_status"`
	ExitObserved bool                      `json:"exit_observed"`
	ExitCode     *int                      `json:"exit_code"`
	Signal       *int                      `json:"signal"`
	StopReason   StopReason                `json:"stop_reason"`
	Complete     bool                      `json:"complete"`
	Capture      map[string]CapturedStream `json:"capture"`
	Receipt      string                    `json:"receipt,omitempty"`
	ReceiptError string                    `json:"receipt_error,omitempty"`
	Stdout       *string                   `json:"stdout,omitempty"`
	StdoutBase64 []byte                    `json:"stdout_base64,omitempty"`
	Stderr       *string                   `json:"stderr,omitempty"`
	StderrBase64 []byte                    `json:"stderr_base64,omitempty"`
	Record       Command                   `json:"record"`
}

// CapturedStream is one stream's capture state in a CaptureOutput.
type CapturedStream struct {
	State string `json:"state"` // complete | incomplete | failed
	Bytes int64  `json:"bytes"` // every byte observed, also beyond the limit
	Error string `json:"error,omitempty"`
	// Artifact is the file that holds the whole stream.
	Artifact string `json:"artifact"`
}

// Complete reports whether both streams were captured whole.
func (r *CaptureResult) Complete() bool {
	return r.Stdout.State == "complete" && r.Stderr.State == "complete"
}

// Text returns stdout as a string, refusing an incomplete capture.
func (r *CaptureResult) Text() (string, error) {
	if r.Stdout.State != "complete" {
		return "", fmt.Errorf("stdout of command %s is %s (%s; see %s): %w", r.Record.ID, r.Stdout.State, r.Stdout.Error, r.Stdout.Artifact, ErrIncompleteCapture)
	}
	return string(r.Stdout.Data), nil
}

// JSON decodes stdout into v, refusing an incomplete capture.
func (r *CaptureResult) JSON(v any) error {
	s, err := r.Text()
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), v)
}

// Capabilities is what the host offers for ownership.
type Capabilities struct {
	Cgroup2       bool   `json:"cgroup2"`
	CgroupMount   string `json:"cgroup_mount,omitempty"`
	CgroupParent  string `json:"cgroup_parent,omitempty"`
	Hybrid        bool   `json:"hybrid"`
	Cgroup2Reason string `json:"cgroup2_reason,omitempty"`
}

// Retention says how long private trees and evidence are kept after an
// environment's confirmed stop.
type Retention struct {
	Trees    *Duration `json:"trees,omitempty" yaml:"trees,omitempty"`
	Evidence *Duration `json:"evidence,omitempty" yaml:"evidence,omitempty"`
}

// StoreConfig is a store's configuration (config.yaml under its root).
type StoreConfig struct {
	Retention Retention `json:"retention" yaml:"retention"`
	Lifetime  struct {
		// Max is the longest an environment may live, from its
		// activation to its deadline; a move of the deadline beyond it
		// (extend) is refused. nil: no limit.
		Max *Duration `json:"max,omitempty" yaml:"max,omitempty"`
	} `json:"lifetime" yaml:"lifetime"`
	Admission struct {
		// Share of logical cores and available memory that admitted agent
		// workloads may use (default 0.70).
		Share float64 `json:"share" yaml:"share"`
	} `json:"admission" yaml:"admission"`
}
