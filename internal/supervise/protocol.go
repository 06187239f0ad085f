package supervise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// GuardianMode is the hidden argv[1] that selects the guardian. The
// guardian itself is C (guardian.c), run by an ELF constructor before the Go
// runtime starts; see doc.go.
const GuardianMode = "__hostfork_guardian"

// Descriptor numbers in the guardian (ExtraFiles start at 3). guardian.h
// holds the same numbers; guardian_cgo.go checks them at compile time.
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

// The control channel (fdControl, launcher → guardian) carries no JSON: the
// guardian is C and parses only this framing.
//
// Release, exactly once, first: the byte 'R', then NUL-terminated
// "key=value" strings, ended by an empty string (a lone NUL):
//
//	'R' "command_id=ID\0" "env_id=ID\0" "path=/usr/bin/sleep\0"
//	"argv=sleep\0" "argv=60\0" "env=HOME=/root\0" ... "\0"
//
// The value runs from the first '=' to the NUL, so it may contain '=' and
// newlines but not NUL. Keys (the JSON names of Config's fields):
// command_id, env_id (at most maxID bytes), path, argv (repeated, in
// order), env (repeated, in order), cwd, output, workload_cgroup (at most
// maxPath bytes), deadline_mono_ns and grace_ns (decimal nanoseconds),
// owner_exit, foreground ("1" or "0"), view_pid (decimal). An unknown key
// or a message longer than maxRelease makes the guardian exit 125 without
// starting anything; EOF before the terminator is an aborted launch (exit
// 0, nothing started).
//
// After the release, newline-terminated text lines:
//
//	"s<signo>\n"   send signal signo to the leader (while it is unreaped)
//	"t<reason>\n"  stop the tree (SIGTERM, grace, SIGKILL); the first
//	               reason is recorded; reason has no newline, at most
//	               maxReason bytes
//
// Unknown lines are ignored. EOF after the release means the owner is gone:
// with owner_exit "stop" the guardian stops the tree with reason
// "owner-exit". SIGTERM to the guardian (what `hostfork stop` sends in the
// subreaper tier) stops the tree with reason "user"; received at the gate,
// it takes effect right after the release.
const (
	msgRelease = 'R'
	msgSignal  = 's'
	msgStop    = 't'

	maxID      = 255
	maxPath    = 4095
	maxReason  = 255
	maxRelease = 16 << 20
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

// Config is what the guardian receives at release (see encodeRelease for
// the wire format; the JSON names are the release keys).
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
	// Idle stops the tree (reason "idle") after this long without
	// output, forwarded signals or control activity, counted from the
	// workload's start before any activity (0: no idle timeout).
	Idle      time.Duration `json:"idle_ns,omitempty"`
	OwnerExit string        `json:"owner_exit"`
	// Foreground makes the workload the terminal's foreground process group
	// (inherit mode on a terminal).
	Foreground bool `json:"foreground,omitempty"`
	// ViewPID, when set, is the keeper whose mount namespace the workload
	// joins before exec.
	ViewPID int `json:"view_pid,omitempty"`
}

// Event is one guardian → launcher message: one JSON line on fdEvents.
// A dead launcher only loses events; the receipt is the durable channel.
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
// kernel reported that the guardian has no children left (ECHILD). The
// guardian rewrites it in place (pwrite at offset 0, so the file keeps the
// device and inode registered at launch): one JSON object and a newline,
// padded with spaces to at least 512 bytes and never shorter than the
// previous text. Times are RFC 3339 with nanoseconds, UTC. It is fsynced
// when it becomes complete.
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

// encodeRelease frames cfg as the release message. It refuses values the
// guardian would reject or that execve can't carry (NUL bytes).
func encodeRelease(cfg *Config) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(msgRelease)
	var bad error
	put := func(key, val string) {
		if strings.IndexByte(val, 0) >= 0 && bad == nil {
			bad = fmt.Errorf("release: %s contains a NUL byte", key)
		}
		b.WriteString(key)
		b.WriteByte('=')
		b.WriteString(val)
		b.WriteByte(0)
	}
	if cfg.Path == "" {
		return nil, fmt.Errorf("release: no executable path")
	}
	if len(cfg.CommandID) > maxID || len(cfg.EnvID) > maxID {
		return nil, fmt.Errorf("release: command or environment id longer than %d bytes", maxID)
	}
	if len(cfg.WorkloadCgroup) > maxPath {
		return nil, fmt.Errorf("release: workload cgroup path longer than %d bytes", maxPath)
	}
	put("command_id", cfg.CommandID)
	put("env_id", cfg.EnvID)
	put("path", cfg.Path)
	for _, a := range cfg.Argv {
		put("argv", a)
	}
	for _, e := range cfg.Env {
		put("env", e)
	}
	if cfg.Cwd != "" {
		put("cwd", cfg.Cwd)
	}
	put("output", cfg.Output)
	if cfg.WorkloadCgroup != "" {
		put("workload_cgroup", cfg.WorkloadCgroup)
	}
	if cfg.DeadlineMono > 0 {
		put("deadline_mono_ns", strconv.FormatInt(int64(cfg.DeadlineMono), 10))
	}
	put("grace_ns", strconv.FormatInt(int64(cfg.Grace), 10))
	if cfg.Idle > 0 {
		put("idle_ns", strconv.FormatInt(int64(cfg.Idle), 10))
	}
	put("owner_exit", cfg.OwnerExit)
	if cfg.Foreground {
		put("foreground", "1")
	}
	if cfg.ViewPID > 0 {
		put("view_pid", strconv.Itoa(cfg.ViewPID))
	}
	b.WriteByte(0)
	if bad != nil {
		return nil, bad
	}
	if b.Len() > maxRelease {
		return nil, fmt.Errorf("release: argv and environment take %d bytes, more than %d", b.Len(), maxRelease)
	}
	return b.Bytes(), nil
}

// encodeStop frames a stop request.
func encodeStop(reason string) ([]byte, error) {
	if reason == "" || len(reason) > maxReason || strings.ContainsAny(reason, "\n\x00") {
		return nil, fmt.Errorf("stop reason %q: want 1 to %d bytes without newline or NUL", reason, maxReason)
	}
	return []byte(string(msgStop) + reason + "\n"), nil
}

// encodeSignal frames a signal for the leader.
func encodeSignal(sig int) []byte {
	return []byte(string(msgSignal) + strconv.Itoa(sig) + "\n")
}

// decodeEvent parses one event line.
func decodeEvent(line []byte) (Event, error) {
	var ev Event
	err := json.Unmarshal(line, &ev)
	return ev, err
}
