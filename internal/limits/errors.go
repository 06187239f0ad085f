package limits

import (
	"errors"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
)

var (
	// ErrUnavailable: a budget names a resource this host can't enforce
	// (no cgroup2 controller and no writable cgroup v1 hierarchy for it).
	ErrUnavailable = errors.New("resource limit unavailable on this host")
	// ErrInvalid: a budget or group name is malformed.
	ErrInvalid = errors.New("invalid resource budget")
	// ErrExists: a group to be created already exists; it is never adopted.
	// It is the cgroup package's sentinel, so one errors.Is covers both.
	ErrExists = cgroup.ErrExists
)
