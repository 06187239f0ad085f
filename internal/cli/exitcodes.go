package cli

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/habemus-papadum/hostfork"
)

// Exit codes of hostfork's own failures (docs/exit-codes.md). run and exec
// otherwise exit with the command's status: its code, or 128+signal.
const (
	ExitOK         = 0
	ExitFailed     = 1   // the operation ran but did not succeed (e.g. stop unconfirmed)
	ExitAmbiguous  = 118 // an id prefix matches several records
	ExitNoSuchID   = 119 // no environment or command has that id
	ExitIncomplete = 120 // a result is unknown or incomplete
	ExitCapability = 121 // the host lacks a requested capability
	ExitAdmission  = 117 // admission refused: host at capacity or paused (--admit fail)
	ExitUsage      = 122 // bad flags, arguments or request
	ExitStore      = 123 // the store root is unusable
	ExitInternal   = 125 // any other failure of hostfork itself
	ExitCannotExec = 126 // the program exists but can't be executed
	ExitNotFound   = 127 // the program was not found
)

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
	switch {
	case errors.Is(err, hostfork.ErrAmbiguous):
		return ExitAmbiguous
	case errors.Is(err, hostfork.ErrNotFound):
		return ExitNoSuchID
	case errors.Is(err, hostfork.ErrExecutableNotFound):
		return ExitNotFound
	case errors.Is(err, hostfork.ErrNotExecutable):
		return ExitCannotExec
	case errors.Is(err, hostfork.ErrInvalid), errors.Is(err, hostfork.ErrEnvNotActive):
		return ExitUsage
	case errors.Is(err, hostfork.ErrStoreFull), errors.Is(err, syscall.ENOSPC):
		return ExitStore
	case errors.Is(err, hostfork.ErrStore):
		return ExitStore
	case errors.Is(err, hostfork.ErrAdmissionRefused):
		return ExitAdmission
	case errors.Is(err, hostfork.ErrCapability):
		return ExitCapability
	case errors.Is(err, hostfork.ErrStopIncomplete):
		return ExitFailed
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
	if code == ExitNoSuchID {
		// The registry's message says what is missing; this names the fix.
		hint = " (list ids with 'hostfork ps --all')"
	}
	fmt.Fprintf(w, "hostfork: %v%s\n", err, hint)
	return code
}
