package hostfork

import (
	"errors"

	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/spec"
)

// Errors callers can test with errors.Is.
var (
	// ErrNotFound: no environment or command has that id (prefix).
	ErrNotFound = registry.ErrNotFound
	// ErrAmbiguous: an id prefix matches more than one record.
	ErrAmbiguous = registry.ErrAmbiguous
	// ErrInvalid: a request (spec, flags) is malformed.
	ErrInvalid = spec.ErrInvalid
	// ErrStore: the store root is unusable (not a directory, not writable,
	// a newer schema).
	ErrStore = errors.New("store unusable")
	// ErrExecutableNotFound: the command's program does not exist.
	ErrExecutableNotFound = errors.New("executable not found")
	// ErrNotExecutable: the program exists but can't be executed.
	ErrNotExecutable = errors.New("not executable")
	// ErrEnvNotActive: the environment is stopping or stopped.
	ErrEnvNotActive = errors.New("environment is not active")
	// ErrCapability: the host lacks a capability the request needs.
	ErrCapability = errors.New("capability unavailable on this host")
	// ErrStoreFull: the store's filesystem is full. New launches are
	// refused before anything is released; stops and deadlines still work.
	ErrStoreFull = registry.ErrFull
	// ErrStopIncomplete: a stop could not verify that the tree is gone.
	ErrStopIncomplete = errors.New("stop could not confirm the tree exited")
)
