package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"syscall"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
)

// statusError gives an error an explicit HTTP status (a malformed body, a
// body over the limit); it still wraps its sentinel for the exit code.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func withStatus(status int, err error) error { return &statusError{status: status, err: err} }

func badRequest(format string, args ...any) error {
	return withStatus(http.StatusBadRequest, fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...))
}

// invalid is a 422: a well-formed request the library would refuse.
func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...)
}

// statusOf is the HTTP status of an error (docs/api.md, "Errors"); the
// first match wins, in the order of the CLI's exit table.
func statusOf(err error) int {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, api.ErrAmbiguous):
		return http.StatusConflict
	case errors.Is(err, api.ErrExecutableNotFound), errors.Is(err, api.ErrNotExecutable):
		return http.StatusUnprocessableEntity
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, api.ErrAdmissionRefused):
		return http.StatusTooManyRequests
	case errors.Is(err, api.ErrStoreFull), errors.Is(err, syscall.ENOSPC):
		return http.StatusInsufficientStorage
	case errors.Is(err, api.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, api.ErrTimedOut):
		return http.StatusGatewayTimeout
	case errors.Is(err, api.ErrConflict), errors.Is(err, api.ErrExists), errors.Is(err, api.ErrEnvNotActive), errors.Is(err, api.ErrCommandFinished), errors.Is(err, api.ErrNoSession):
		return http.StatusConflict
	case errors.Is(err, api.ErrInvalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, api.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// writeError answers with the error body.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	body := client.ErrorBody{Message: err.Error(), Cause: client.CauseOf(err), ExitCode: s.exitCode(err)}
	writeJSON(w, statusOf(err), body)
}

func (s *Server) exitCode(err error) int {
	if s.cfg.ExitCode == nil {
		return 125
	}
	return s.cfg.ExitCode(err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(emptyNotNull(v))
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(client.ErrorBody{Message: "encoding the answer: " + err.Error(), ExitCode: 125})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// emptyNotNull turns a nil slice into an empty one: a list answers [],
// never null.
func emptyNotNull(v any) any {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		return reflect.MakeSlice(rv.Type(), 0, 0).Interface()
	}
	return v
}
