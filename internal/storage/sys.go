package storage

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ignoringEINTR retries fn while it fails with EINTR.
func ignoringEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// ignoringEINTR2 is ignoringEINTR for calls that return a value.
func ignoringEINTR2[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

// ioctlPtr issues ioctl(fd, req, arg) and retries on EINTR.
func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	return ignoringEINTR(func() error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if e != 0 {
			return e
		}
		return nil
	})
}
