package supervise

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// GuardianMode is the hidden argv[1] that selects the guardian. The
// guardian itself is C (guardian.c), run by an ELF constructor before the Go
// runtime starts; see doc.go.
const GuardianMode = "__hostfork_guardian"

// Descriptor numbers in the guardian (ExtraFiles start at 3). guardian.h
// holds the same numbers; guardian_cgo.go checks them at compile time.
const (
	fdControl = 3 // launcher → guardian: release, signal, stop; EOF = owner gone
	fdEvents  = 4 // guardian → launcher: one line of key=value fields an event
	fdReceipt = 5 // the proof/receipt file, opened by the launcher (O_EXCL)
	fdStdin   = 6
	fdStdout  = 7
	fdStderr  = 8
	fdFwdOut  = 9 // pipe mode: forward copies of stdout to the launcher
	fdFwdErr  = 10
	fdDir     = 11 // the command's directory (guardian.log is made there on first use)
	// fdParent is the directory the command's directory is made in, when
	// that directory does not exist yet as the guardian starts (an exec
	// that registers its guardian in its reservation, decision 56): after
	// the release the guardian opens the entry named by command_id beneath
	// it (no symlink followed) as fdDir.
	fdParent = 12
)

// The control channel (fdControl, launcher → guardian) carries no JSON: the
// guardian is C and parses only this framing.
//
// Release, exactly once, first: the length of the rest (uint32, native
// byte order), then NUL-terminated "key=value" strings:
//
//	LEN "command_id=ID\0" "env_id=ID\0" "path=/usr/bin/sleep\0"
//	"argv=sleep\0" "argv=60\0" "env=HOME=/root\0" ...
//
// The value runs from the first '=' to the NUL, so it may contain '=' and
// newlines but not NUL. Keys (the JSON names of Config's fields):
// command_id, env_id (at most maxID bytes), path, argv (repeated, in
// order), env (repeated, in order), cwd, output, workload_cgroup,
// cgroup_mount, guardians_cgroup (at most maxPath bytes), v1_join
// (repeated, at most maxJoin: the cgroup.procs file of each v1 group the
// workload joins), deadline_mono_ns, timeout_mono_ns, grace_ns
// and idle_ns (decimal nanoseconds), owner_exit, foreground and auto_stop
// ("1" or "0"), view_pid and view_start (decimal), view_userns ("1": the
// keeper's view is rootless, so its user namespace is joined too),
// deadline_file (DeadlineFile in the environment's run directory, where a
// moved deadline is), boot_id (the launcher's, for the receipt; at most
// maxID bytes).
// An unknown key or a
// message longer than maxRelease makes the guardian exit 125 without
// starting anything; EOF before the terminator is an aborted launch (exit
// 0, nothing started).
//
// After the release, newline-terminated text lines:
//
//	"s<signo>\n"   send signal signo to the leader (while it is unreaped)
//	"t<code>\n"    stop the tree (SIGTERM, grace, SIGKILL); the first
//	               reason is recorded; code is the reason's number
//	               (reasonCodes; an unknown one is "user")
//
// Unknown lines are ignored. EOF after the release means the owner is gone:
// with owner_exit "stop" the guardian stops the tree with reason
// "owner-exit".
//
// Signals: a plain SIGTERM to the guardian stops the tree with reason
// "user" (or "deadline" at the deadline: a systemd manager enforcing the
// scope's timer). A queued SIGTERM (StopSignal) carries a reason and a
// grace: the guardian stops its tree with them, or, marked as a notice, only
// records the reason — the sender stops the tree itself — and kills the tree
// after the grace plus 2 s if the sender did not finish. Received at the
// gate, a stop takes effect right after the release.
//
// SIGURG (DeadlineSignal) says the environment's deadline moved: the
// guardian reads deadline_file again (deadline.go).
const (
	msgSignal = 's'
	msgStop   = 't'

	maxID      = 255
	maxPath    = 4095
	maxRelease = 16 << 20
	maxJoin    = 8

	stopNotice = 1 << 8
	graceShift = 9
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

// reasonCodes are the stop reasons a queued stop signal and the C helpers
// know, by code (hf.h, HF_R_*): index = code.
var reasonCodes = [...]api.StopReason{"", api.ReasonUser, api.ReasonDeadline, api.ReasonIdle, api.ReasonOwnerExit,
	api.ReasonTimeout, api.ReasonCancelled, api.ReasonCompleted, api.ReasonKeeperLost, api.ReasonLimit, api.ReasonAbandoned}

// reasonCode is r's code (0: unknown to the helpers).
func reasonCode(r api.StopReason) int {
	for i, c := range reasonCodes {
		if i > 0 && c == r {
			return i
		}
	}
	return 0
}

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
	// empty in the subreaper tier. CgroupMount is the cgroup2 mount it is
	// under; GuardiansCgroup the environment's group of guardians (where
	// this guardian is).
	WorkloadCgroup  string `json:"workload_cgroup,omitempty"`
	CgroupMount     string `json:"cgroup_mount,omitempty"`
	GuardiansCgroup string `json:"guardians_cgroup,omitempty"`
	// V1Join are cgroup v1 groups the workload joins before exec (its own
	// limit groups: v1 has no clone-into).
	V1Join []string `json:"v1_join,omitempty"`
	// OOMFile is the command's own file with an oom_kill counter (its v1
	// memory group's memory.oom_control, or its cgroup2 group's
	// memory.events); the guardian samples it to tell whether the OOM
	// killer took the leader itself (Receipt.LeaderOOM).
	OOMFile string `json:"oom_file,omitempty"`
	// DeadlineMono is the force-stop time on CLOCK_MONOTONIC (0: none);
	// graceful termination starts Grace earlier. TimeoutMono is the
	// command's own timeout: its stop starts then, and never extends the
	// deadline.
	DeadlineMono time.Duration `json:"deadline_mono_ns,omitempty"`
	TimeoutMono  time.Duration `json:"timeout_mono_ns,omitempty"`
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
	// joins before exec, and ViewStart its start time (checked through a
	// pidfd first).
	ViewPID   int    `json:"view_pid,omitempty"`
	ViewStart uint64 `json:"view_start,omitempty"`
	// AutoStop: when this tree has exited, the environment ends (the
	// guardian asks the other guardians and the keeper to stop, reason
	// "completed"): an environment made by run.
	AutoStop bool `json:"auto_stop,omitempty"`
	// Session is "tty" (the guardian holds a pty master; the pty is the
	// workload's controlling terminal, TTYCols x TTYRows) or "stdin" (the
	// guardian holds the write end of the workload's stdin pipe), served
	// on session.sock in the command's directory (docs/sessions.md).
	Session string `json:"session,omitempty"`
	TTYCols uint16 `json:"tty_cols,omitempty"`
	TTYRows uint16 `json:"tty_rows,omitempty"`
	// RunDir is the environment's run directory: a moved deadline
	// (DeadlineFile) there replaces DeadlineMono.
	RunDir string `json:"run_dir,omitempty"`
}

// Event is one guardian → launcher message, a line "ev=KIND" on fdEvents
// (fields.go), written once the receipt holds what it announces: the
// facts (the workload's identity, the exit, the stop reason, a start
// error) are read from the receipt, which the event vouches for. A dead
// launcher only loses events; the receipt is the durable channel.
type Event struct {
	Kind string `json:"ev"` // started | exec-failed | leader | tree
}

// Receipt is the guardian's durable record, written through fdReceipt.
// It grows as the command progresses; Complete is set only after the
// kernel reported that the guardian has no children left (ECHILD). The
// guardian rewrites it in place (pwrite at offset 0, so the file keeps the
// device and inode registered at launch): one key=value field a line,
// keyed by the JSON names below (a field whose zero value means none is
// always written; the others once known), ended by a line with the hash of the text
// (fields.go, ParseReceipt), padded with spaces to at least 512 bytes and
// never shorter than the previous text. It is fsynced when it becomes
// complete.
type Receipt struct {
	CommandID string `json:"command_id"`
	EnvID     string `json:"env_id"`
	BootID    string `json:"boot_id"`
	Guardian  int    `json:"guardian_pid"`
	ProofDev  uint64 `json:"proof_dev"`
	ProofIno  uint64 `json:"proof_ino"`

	WorkloadPID   int            `json:"workload_pid,omitempty"`
	WorkloadStart uint64         `json:"workload_start,omitempty"`
	StartError    string         `json:"start_error,omitempty"`
	LeaderExited  *time.Time     `json:"leader_exited_at,omitempty"`
	ExitCode      *int           `json:"exit_code,omitempty"`
	Signal        *int           `json:"signal,omitempty"`
	StopReason    api.StopReason `json:"stop_reason,omitempty"`
	// StoppedByHostfork: the leader exited after a stop had begun.
	StoppedByHostfork bool `json:"stopped_by_hostfork,omitempty"`
	// OutsideCgroup counts members a stop found outside the workload
	// cgroup (descendants that moved themselves out); MembershipUnstable
	// says the membership did not settle before a kill.
	OutsideCgroup      int        `json:"outside_cgroup,omitempty"`
	MembershipUnstable bool       `json:"membership_unstable,omitempty"`
	TreeExited         *time.Time `json:"tree_exited_at,omitempty"`
	// OutputTruncated: the artifact files may be shorter than the
	// output — a write to them failed (pipe mode; the file is the exact
	// prefix written before), or their filesystem had less than 128 KiB
	// left when the tree exited (files mode, where the workload writes
	// them itself and got the error).
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// LeaderOOM says, when the leader died of SIGKILL and the command's
	// OOM counter was being sampled, whether that counter rose since the
	// last sample taken while the leader lived (every 10 ms while the
	// guardian gets the CPU): true, the OOM killer took the leader; false,
	// the kill came from elsewhere. A child's OOM kill followed by a kill
	// of the leader from elsewhere before the next sample reads as true.
	LeaderOOM *bool `json:"leader_oom,omitempty"`
	// LeaderOOMStaleMS: the leader died of SIGKILL and the guardian can't
	// tell whose kill it was: it first saw the leader dying this many
	// milliseconds after its last sample kept while the leader lived
	// (more than twice the period: it did not get the CPU), or it could
	// not read the counter then, or it never kept a sample (the age is
	// then from the workload's start). LeaderOOM is then absent.
	LeaderOOMStaleMS int64 `json:"leader_oom_stale_ms,omitempty"`
	// LastInputAt and LastOutputAt: a session's last input and output
	// (rewritten at most once a second while it runs).
	LastInputAt  *time.Time `json:"last_input_at,omitempty"`
	LastOutputAt *time.Time `json:"last_output_at,omitempty"`
	Complete     bool       `json:"complete"`
}

// encodeRelease frames cfg as the release message. It refuses values the
// guardian would reject or that execve can't carry (NUL bytes).
func encodeRelease(cfg *Config) ([]byte, error) {
	var b bytes.Buffer
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
	if len(cfg.WorkloadCgroup) > maxPath || len(cfg.CgroupMount) > maxPath || len(cfg.GuardiansCgroup) > maxPath {
		return nil, fmt.Errorf("release: a cgroup path is longer than %d bytes", maxPath)
	}
	if len(cfg.V1Join) > maxJoin {
		return nil, fmt.Errorf("release: %d v1 groups to join, at most %d", len(cfg.V1Join), maxJoin)
	}
	if cfg.WorkloadCgroup != "" {
		put("workload_cgroup", cfg.WorkloadCgroup)
	}
	if cfg.CgroupMount != "" {
		put("cgroup_mount", cfg.CgroupMount)
	}
	if cfg.GuardiansCgroup != "" {
		put("guardians_cgroup", cfg.GuardiansCgroup)
	}
	if cfg.OOMFile != "" {
		if len(cfg.OOMFile) > maxPath {
			return nil, fmt.Errorf("release: oom_file longer than %d bytes", maxPath)
		}
		put("oom_file", cfg.OOMFile)
	}
	for _, j := range cfg.V1Join {
		if len(j) > maxPath {
			return nil, fmt.Errorf("release: v1 group path longer than %d bytes", maxPath)
		}
		put("v1_join", j+"/cgroup.procs")
	}
	if cfg.DeadlineMono > 0 {
		put("deadline_mono_ns", strconv.FormatInt(int64(cfg.DeadlineMono), 10))
	}
	if cfg.TimeoutMono > 0 {
		put("timeout_mono_ns", strconv.FormatInt(int64(cfg.TimeoutMono), 10))
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
		put("view_start", strconv.FormatUint(cfg.ViewStart, 10))
		if RootlessView() {
			put("view_userns", "1")
		}
	}
	if cfg.AutoStop {
		put("auto_stop", "1")
	}
	if cfg.Session != "" {
		if cfg.Session != "tty" && cfg.Session != "stdin" {
			return nil, fmt.Errorf("release: session %q is neither tty nor stdin", cfg.Session)
		}
		put("session", cfg.Session)
	}
	if cfg.TTYCols > 0 && cfg.TTYRows > 0 {
		put("tty_cols", strconv.Itoa(int(cfg.TTYCols)))
		put("tty_rows", strconv.Itoa(int(cfg.TTYRows)))
	}
	if cfg.RunDir != "" {
		file := filepath.Join(cfg.RunDir, DeadlineFile)
		if len(file) > maxPath {
			return nil, fmt.Errorf("release: run_dir longer than %d bytes", maxPath-len(DeadlineFile)-1)
		}
		put("deadline_file", file)
	}
	if boot, err := linux.BootID(); err == nil {
		if len(boot) > maxID {
			return nil, fmt.Errorf("release: boot id longer than %d bytes", maxID)
		}
		put("boot_id", boot)
	}
	if bad != nil {
		return nil, bad
	}
	if b.Len() > maxRelease {
		return nil, fmt.Errorf("release: argv and environment take %d bytes, more than %d", b.Len(), maxRelease)
	}
	return frameMsg(b.Bytes()), nil
}

// frameMsg puts the length of a message's strings before them (hf.h,
// struct hf_msg).
func frameMsg(body []byte) []byte {
	return append(binary.NativeEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// encodeStop frames a stop request: the reason's code (reasonCodes).
func encodeStop(reason api.StopReason) ([]byte, error) {
	code := reasonCode(reason)
	if code == 0 {
		return nil, fmt.Errorf("stop reason %q is not one the guardian knows", reason)
	}
	return []byte(string(msgStop) + strconv.Itoa(code) + "\n"), nil
}

// StopValue is the si_int of a queued stop signal: the reason's code, the
// notice flag and the grace in units of 10 ms (hf.h, HF_STOP_NOTICE).
func StopValue(reason api.StopReason, notice bool, grace time.Duration) int32 {
	v := int32(reasonCode(reason))
	if v == 0 {
		v = int32(reasonCode(api.ReasonUser))
	}
	if notice {
		v |= stopNotice
	}
	g := min(max(grace/(10*time.Millisecond), 0), 1<<22-1)
	return v | int32(g)<<graceShift
}

// encodeSignal frames a signal for the leader.
func encodeSignal(sig int) []byte {
	return []byte(string(msgSignal) + strconv.Itoa(sig) + "\n")
}
