package storage

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// ioctlPtr issues ioctl(fd, req, arg) and retries on EINTR.
func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	return linux.IgnoringEINTR(func() error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if e != 0 {
			return e
		}
		return nil
	})
}
