package safefs

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// noLinks refuses every symbolic link, magic links (/proc/PID/fd/N,
// /proc/PID/root) included.
const noLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2 is openat2(2) with O_CLOEXEC, retried on EINTR and, a bounded
// number of times, on the EAGAIN the kernel returns when a rename raced a
// RESOLVE_BENEATH lookup.
func openat2(dirfd int, name string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch {
		case err == unix.EINTR, err == unix.EAGAIN && i < 64:
			continue
		case err == unix.ENOSYS:
			return -1, fmt.Errorf("openat2 is not available (Linux 5.6 or later is needed): %w", err)
		}
		return fd, err
	}
}

// openat is openat(2) with O_CLOEXEC, retried on EINTR.
func openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	return linux.IgnoringEINTR2(func() (int, error) { return unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, mode) })
}

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := linux.IgnoringEINTR(func() error { return unix.Fstat(fd, &st) })
	return st, err
}

// fstatfsID returns statfs' f_fsid of fd's filesystem as one number.
func fstatfsID(fd int) (uint64, error) {
	var sf unix.Statfs_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatfs(fd, &sf) }); err != nil {
		return 0, err
	}
	return uint64(uint32(sf.Fsid.Val[0]))<<32 | uint64(uint32(sf.Fsid.Val[1])), nil
}

// Futimens sets the access and modification times of the file open as fd
// (utimensat with a NULL path), following nothing: the descriptor is the
// file.
func Futimens(fd int, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	return linux.IgnoringEINTR(func() error {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}

// pathErr wraps err as an *os.PathError.
func pathErr(op, path string, err error) error {
	return &os.PathError{Op: op, Path: path, Err: err}
}
