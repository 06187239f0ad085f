package linux

import (
	"errors"

	"golang.org/x/sys/unix"
)

// IgnoringEINTR retries fn while it fails with EINTR.
func IgnoringEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// IgnoringEINTR2 is IgnoringEINTR for calls that return a value.
func IgnoringEINTR2[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}
