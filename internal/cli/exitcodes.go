package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/client"
)

// Exit codes of hostfork's own failures (docs/exit-codes.md). run and exec
// otherwise exit with the command's status: its code, or 128+signal, or 124
// when hostfork ended the command.
const (
	ExitOK         = 0
	ExitFailed     = 1   // the operation ran but did not succeed (a stop that could not confirm the tree's end, a failed export, a wait whose command ended first)
	ExitTimedOut   = 115 // a wait's --timeout passed before its condition held (the command runs on)
	ExitForbidden  = 116 // a hostfork server refused this user
	ExitAdmission  = 117 // admission refused: host at capacity or paused (--admit fail)
	ExitAmbiguous  = 118 // an id prefix matches several records
	ExitNoSuchID   = 119 // no environment or command has that id
	ExitIncomplete = 120 // a result is unknown or incomplete
	ExitCapability = 121 // the host lacks a requested capability
	ExitUsage      = 122 // bad flags, arguments or request
	ExitStore      = 123 // the store is unusable (or full)
	ExitEnded      = 124 // hostfork ended the command (deadline, timeout, idle, owner exit, OOM), as timeout(1)
	ExitInternal   = 125 // any other failure of hostfork itself
	ExitCannotExec = 126 // the program exists but can't be executed
	ExitNotFound   = 127 // the program was not found
	ExitNoSession  = 114 // attach, send or resize to a command without a session (start it with --tty or --stdin pipe)
	ExitFinished   = 113 // attach, send or resize to a command whose leader has exited (its output stays in its log)
)

// exitTable maps each sentinel error to its exit code; the first match
// wins. It is the one place an error becomes an exit code (the server's
// HTTP statuses and error bodies use it too: ExitCodeOf).
var exitTable = []struct {
	err  error
	code int
}{
	{hostfork.ErrAmbiguous, ExitAmbiguous},
	{hostfork.ErrNoSession, ExitNoSession},
	{hostfork.ErrCommandFinished, ExitFinished},
	{hostfork.ErrExecutableNotFound, ExitNotFound},
	{hostfork.ErrNotExecutable, ExitCannotExec},
	{hostfork.ErrNotFound, ExitNoSuchID},
	{hostfork.ErrForbidden, ExitForbidden},
	{hostfork.ErrAdmissionRefused, ExitAdmission},
	{hostfork.ErrStoreFull, ExitStore},
	{syscall.ENOSPC, ExitStore},
	{hostfork.ErrStore, ExitStore},
	{hostfork.ErrUnsupported, ExitCapability},
	{hostfork.ErrIncompleteCapture, ExitIncomplete},
	{hostfork.ErrUnverified, ExitFailed},
	{hostfork.ErrExportFailed, ExitFailed},
	{hostfork.ErrTimedOut, ExitTimedOut},
	{hostfork.ErrEnvNotActive, ExitUsage}, // before ErrConflict: a refused precondition wraps both
	{hostfork.ErrConflict, ExitFailed},
	{hostfork.ErrExists, ExitUsage},
	{hostfork.ErrInvalid, ExitUsage},
}

// ExitCodeOf is the exit code of err (ExitOK for nil).
func ExitCodeOf(err error) int {
	if err == nil {
		return ExitOK
	}
	return codeFor(err)
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// withCode attaches an explicit exit code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// usageErr is a usage error with a message that names the fix.
func usageErr(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// codeFor maps an error to its exit code.
func codeFor(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// A server's answer carries the code it maps the failure to.
	if code, ok := client.ExitCode(err); ok && code != 0 {
		return code
	}
	for _, t := range exitTable {
		if errors.Is(err, t.err) {
			return t.code
		}
	}
	return ExitInternal
}

// report prints a one-line error and returns its exit code.
func report(w io.Writer, err error) int {
	code := codeFor(err)
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return code
	}
	hint := ""
	if errors.Is(err, hostfork.ErrStoreFull) || errors.Is(err, syscall.ENOSPC) {
		hint = " (free space on the store's filesystem, or run 'hostfork gc'; stop and deadlines keep working meanwhile)"
	}
	var oe *net.OpError
	if _, isAnswer := client.ExitCode(err); !isAnswer && errors.As(err, &oe) && oe.Op == "dial" {
		hint = " (is 'hostfork serve' running there? --host or $HOSTFORK_HOST names the server)"
	}
	var pe pathError
	if code == ExitNoSuchID && !errors.As(err, &pe) {
		// The library's message says what is missing; this names the fix.
		hint = " (list ids with 'hostfork ps --all' or 'hostfork envs --all')"
	}
	fmt.Fprintf(w, "hostfork: %s%s\n", errText(err), hint)
	return code
}
