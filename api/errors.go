package api

import "errors"

// The sentinel errors of hostfork. Every error the library, the server or
// the client returns for one of these conditions wraps exactly one of them,
// so callers test with errors.Is; the CLI maps them to its exit codes
// (docs/exit-codes.md) and the server to HTTP statuses (docs/api.md).
var (
	// ErrNotFound: no environment, command or baseline has that id or name.
	ErrNotFound = errors.New("not found")
	// ErrAmbiguous: an id prefix matches more than one record.
	ErrAmbiguous = errors.New("ambiguous id prefix")
	// ErrExists: the thing to be created already exists (an export
	// destination, a baseline name, an allocation destination).
	ErrExists = errors.New("already exists")
	// ErrConflict: the record changed since it was read (another writer
	// decided first); read again and decide again.
	ErrConflict = errors.New("revision conflict")
	// ErrEnvNotActive: the environment is stopping, stopped or failed, or
	// has reached its deadline, or lost its keeper: it takes no command.
	ErrEnvNotActive = errors.New("environment is not active")
	// ErrInvalid: a request (spec, flags, options, body) is malformed.
	ErrInvalid = errors.New("invalid request")
	// ErrUnsupported: the host lacks a capability the request needs.
	ErrUnsupported = errors.New("unsupported on this host")
	// ErrAdmissionRefused: admission refused a workload (host at capacity
	// or admission paused, with admit mode fail).
	ErrAdmissionRefused = errors.New("admission refused")
	// ErrIncompleteCapture: captured output is not the whole output.
	ErrIncompleteCapture = errors.New("captured output is incomplete")
	// ErrStoreFull: the store's filesystem is full. Launches are refused
	// before anything is released; stops and deadlines still work.
	ErrStoreFull = errors.New("the store's filesystem is full")
	// ErrStore: the store can't be used (not a directory, not writable,
	// owned or writable by another user, not a hostfork store, a newer
	// schema).
	ErrStore = errors.New("store unusable")
	// ErrUnverified: a result could not be verified: a tree's exit, a
	// stop, a process identity. The record says what is known.
	ErrUnverified = errors.New("unverified")
	// ErrClosed: the Host (or client) was closed.
	ErrClosed = errors.New("hostfork: closed")
	// ErrExecutableNotFound: the command's program does not exist.
	ErrExecutableNotFound = errors.New("executable not found")
	// ErrNotExecutable: the program exists but can't be executed.
	ErrNotExecutable = errors.New("not executable")
	// ErrForbidden: the caller may not do this (the server refused the
	// peer, or the operating system refused the operation).
	ErrForbidden = errors.New("forbidden")
	// ErrExportFailed: an export did not produce a usable copy; the
	// result says what was copied and where the partial copy is.
	ErrExportFailed = errors.New("export failed")
	// ErrTimedOut: a wait's own time limit (its timeout) passed before its
	// condition held; the command runs on.
	ErrTimedOut = errors.New("timed out")
	// ErrNoSession: the command has no session to attach to, send to or
	// resize (it was started without a terminal or a stdin pipe).
	ErrNoSession = errors.New("command has no session: start it with --tty or --stdin pipe")
	// ErrCommandFinished: the command's leader has exited, so its session
	// is over (its output stays in its log).
	ErrCommandFinished = errors.New("command has finished")
)
