package client

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/habemus-papadum/hostfork/api"
)

// APIVersion is the version of the HTTP API this package speaks; every
// response of the server carries it in the header named by VersionHeader.
const APIVersion = "1"

// VersionHeader is the response header that carries the API version.
const VersionHeader = "Hostfork-API-Version"

// CommandRequest is the body of POST /v1/envs/{id}/commands: a detached
// command in the environment, with its output in files.
type CommandRequest struct {
	Argv []string `json:"argv"`
	// Cwd is the working directory, resolved inside the environment's
	// view ("" = the server's).
	Cwd string `json:"cwd,omitempty"`
	// Env holds K=V variables applied last, after the launch environment
	// policy (the library's Command.EnvSet): their names are recorded,
	// their values are not.
	Env []string `json:"env,omitempty"`
	// EnvPolicy is inherit, clean, host-shell or toolchain ("" = the
	// environment's).
	EnvPolicy string            `json:"env_policy,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Purpose   string            `json:"purpose,omitempty"`
	// Timeout stops the command's tree this long after it starts (never
	// beyond the environment's deadline); 0s: none.
	Timeout api.Duration `json:"timeout,omitempty"`
	// Workload "agent" makes the command take part in admission; Admit is
	// then fail (the default through the server: a full host answers 429)
	// or skip. Waiting for a slot is not offered over HTTP: retry on 429.
	Workload string `json:"workload,omitempty"`
	Admit    string `json:"admit,omitempty"`
	// TTY gives the command a pseudo-terminal of Cols x Rows (80x24 if
	// zero), held by its guardian: attach to it, type into it (input),
	// resize it. Stdin "pipe" instead gives a command without a terminal a
	// stdin pipe that input writes to (docs/sessions.md).
	TTY   bool   `json:"tty,omitempty"`
	Cols  uint16 `json:"cols,omitempty"`
	Rows  uint16 `json:"rows,omitempty"`
	Stdin string `json:"stdin,omitempty"`
}

// RunRequest is the body of POST /v1/runs: an environment and its first
// command, as 'hostfork run --detach' makes them. The environment stops
// when the command's tree has exited (auto_stop), or at its deadline.
type RunRequest struct {
	// Env is the environment's spec: a spec.Environment, or anything that
	// marshals to a spec file's JSON. Its lifetime needs max_runtime or
	// until_stopped; owner_exit is detach.
	Env any `json:"env"`
	// Command is the first command (detached, output in files).
	Command CommandRequest `json:"command"`
}

// Resolved is the answer of GET /v1/resolve/{id}: what an id or a unique
// prefix names.
type Resolved struct {
	// Kind is "env" or "command".
	Kind string `json:"kind"`
	// ID is the whole id.
	ID string `json:"id"`
}

// GCRequest is the body of POST /v1/gc: one retention pass, as 'hostfork
// gc' makes it.
type GCRequest struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// RetainTrees and RetainEvidence override the configured and
	// per-environment retention for this pass.
	RetainTrees    *api.Duration `json:"retain_trees,omitempty"`
	RetainEvidence *api.Duration `json:"retain_evidence,omitempty"`
	// Force lists stopped environments (ids or prefixes) whose trees and
	// evidence are discarded now.
	Force []string `json:"force,omitempty"`
	// DeleteBranches also deletes the branch of each worktree tree
	// removed.
	DeleteBranches bool `json:"delete_branches,omitempty"`
}

// BaselineRequest is the body of POST /v1/baselines.
type BaselineRequest struct {
	Name string `json:"name"`
	// Path is absolute, on the server's host.
	Path string `json:"path"`
}

// Removed is the answer of DELETE /v1/baselines/{name}.
type Removed struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

// ForkRequest is the body of POST /v1/envs/{id}/fork. The children are
// detached (owner-exit detach), like every environment made through the
// server.
type ForkRequest struct {
	// Count is how many environments to make, 1 to 64.
	Count int `json:"count"`
	// Labels are added to the parent's labels on every child.
	Labels map[string]string `json:"labels,omitempty"`
	// TTL, when set, is each child's time limit (e.g. "30m"); otherwise
	// the parent's spec's.
	TTL api.Duration `json:"ttl,omitempty"`
}

// ExportRequest is the body of POST /v1/envs/{id}/export.
type ExportRequest struct {
	// Tree names one of the environment's private trees.
	Tree string `json:"tree"`
	// Destination is an absolute path that must not exist; the server
	// creates it (as the server's user). It may be empty with Commit:
	// then nothing is copied.
	Destination string `json:"destination,omitempty"`
	// Commit, for a worktree tree, commits everything in it on its
	// branch (hostfork/ENV/TREE) with this message first.
	Commit string `json:"commit,omitempty"`
}

// SignalRequest is the body of POST /v1/commands/{id}/signal. Signal is a
// name ("TERM", "SIGTERM") or a number ("15"); the server also accepts a
// JSON number.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// InputRequest is the body of POST /v1/commands/{id}/input: text (or
// bytes, base64) typed into the command's terminal or written to its
// stdin pipe, then, with EOF, the end of input (the pipe closed; ^D on a
// terminal).
type InputRequest struct {
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64,omitempty"`
	EOF    bool   `json:"eof,omitempty"`
}

// InputResult is the answer of POST /v1/commands/{id}/input: the bytes
// the guardian wrote, and whether it closed the input.
type InputResult struct {
	Bytes int  `json:"bytes"`
	EOF   bool `json:"eof"`
}

// ResizeRequest is the body (and the answer) of POST
// /v1/commands/{id}/resize.
type ResizeRequest struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// Frames of GET /v1/commands/{id}/attach, a WebSocket: each binary
// message is one frame of the session protocol (docs/sessions.md), its
// type byte then its payload (the socket's length field is left out: a
// WebSocket message has its own). The client sends Data, Resize and EOF;
// the server sends Welcome first, then Output, and Exit last.
const (
	FrameData    byte = 'd' // input bytes, at most MaxInputFrame
	FrameResize  byte = 'r' // cols, rows: two big-endian uint16
	FrameEOF     byte = 'e' // end of input (^D on a terminal)
	FrameWelcome byte = 'H' // kind (1 tty, 2 stdin pipe), replay start, replay end: uint8, int64, int64
	FrameOutput  byte = 'o' // output bytes
	FrameExit    byte = 'x' // the leader's exit code (-1: none) and signal (0: none): two int32
)

// MaxInputFrame is the largest payload of a client's frame; a bigger
// message closes the WebSocket with status 1009 (message too big).
const MaxInputFrame = 16 << 10

// PauseState is the answer of POST /v1/pause and POST /v1/resume.
type PauseState struct {
	Paused bool `json:"paused"`
}

// Ping is the answer of GET /v1/_ping.
type Ping struct {
	OK         bool   `json:"ok"`
	APIVersion string `json:"api_version"`
}

// VersionInfo is the answer of GET /v1/version: the server binary's build
// provenance, as `hostfork version --json` prints it.
type VersionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Commit    string `json:"commit"`
	Dirty     *bool  `json:"dirty"`
	CommitAt  string `json:"commit_time,omitempty"`
	Kind      string `json:"kind"`
	// Link is "static" (the installed build), "dynamic" or "unknown"
	// (hostfork version --json).
	Link string `json:"link"`
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Message string `json:"message"`
	// Cause names the sentinel error the failure wraps (see Causes), ""
	// when it wraps none.
	Cause string `json:"cause,omitempty"`
	// ExitCode is the CLI's exit code for the same failure
	// (docs/exit-codes.md).
	ExitCode int `json:"exit_code"`
}

// causes names each sentinel of package api on the wire; the first match
// wins (the same order as the CLI's exit table).
var causes = []struct {
	name string
	err  error
}{
	{"ambiguous", api.ErrAmbiguous},
	{"executable_not_found", api.ErrExecutableNotFound},
	{"not_executable", api.ErrNotExecutable},
	{"not_found", api.ErrNotFound},
	{"forbidden", api.ErrForbidden},
	{"admission_refused", api.ErrAdmissionRefused},
	{"store_full", api.ErrStoreFull},
	{"store_full", syscall.ENOSPC},
	{"store", api.ErrStore},
	{"unsupported", api.ErrUnsupported},
	{"incomplete_capture", api.ErrIncompleteCapture},
	{"unverified", api.ErrUnverified},
	{"export_failed", api.ErrExportFailed},
	{"timed_out", api.ErrTimedOut},
	{"no_session", api.ErrNoSession},
	{"command_finished", api.ErrCommandFinished},
	{"conflict", api.ErrConflict},
	{"exists", api.ErrExists},
	{"env_not_active", api.ErrEnvNotActive},
	{"invalid", api.ErrInvalid},
	{"closed", api.ErrClosed},
}

// CauseOf names the sentinel err wraps ("" for none).
func CauseOf(err error) string {
	for _, c := range causes {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return ""
}

// sentinelOf is the sentinel a cause name stands for (nil for none).
func sentinelOf(cause string) error {
	if cause == "store_full" {
		return api.ErrStoreFull
	}
	for _, c := range causes {
		if c.name == cause {
			return c.err
		}
	}
	return nil
}

// Error is an error answer of the server. It wraps the sentinel its cause
// names, so errors.Is works against a server.
type Error struct {
	// Status is the HTTP status.
	Status   int
	Message  string
	Cause    string
	ExitCode int
	sentinel error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "hostfork server: HTTP status " + strconv.Itoa(e.Status)
	}
	return e.Message
}

// Unwrap returns the api sentinel the error's cause names.
func (e *Error) Unwrap() error { return e.sentinel }

// ExitCode is the CLI's exit code carried by an error of the server, or
// ok=false when err is not one.
func ExitCode(err error) (code int, ok bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.ExitCode, true
	}
	return 0, false
}
