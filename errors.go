package hostfork

import "github.com/habemus-papadum/hostfork/api"

// Errors callers test with errors.Is. They are the sentinels of package
// api; every error of this package for one of these conditions wraps
// exactly one of them. The CLI's exit codes come from one table keyed by
// them (docs/exit-codes.md).
var (
	ErrNotFound           = api.ErrNotFound
	ErrAmbiguous          = api.ErrAmbiguous
	ErrExists             = api.ErrExists
	ErrConflict           = api.ErrConflict
	ErrEnvNotActive       = api.ErrEnvNotActive
	ErrInvalid            = api.ErrInvalid
	ErrUnsupported        = api.ErrUnsupported
	ErrAdmissionRefused   = api.ErrAdmissionRefused
	ErrIncompleteCapture  = api.ErrIncompleteCapture
	ErrStoreFull          = api.ErrStoreFull
	ErrStore              = api.ErrStore
	ErrUnverified         = api.ErrUnverified
	ErrClosed             = api.ErrClosed
	ErrExecutableNotFound = api.ErrExecutableNotFound
	ErrNotExecutable      = api.ErrNotExecutable
	ErrForbidden          = api.ErrForbidden
	ErrExportFailed       = api.ErrExportFailed
	ErrTimedOut           = api.ErrTimedOut
	ErrNoSession          = api.ErrNoSession
	ErrCommandFinished    = api.ErrCommandFinished
)
