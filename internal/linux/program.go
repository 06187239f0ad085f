package linux

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// OpenProgram opens p, a program of hostfork's own that it is about to
// execute (the companion), and checks on the descriptor that
// it is a regular file this user may execute, not on a noexec mount, and
// that only root or this user can have written: owned by one of them and
// writable by nobody else. The caller executes the descriptor
// (/proc/self/fd/N), so the file checked is the file run. A refusal is a
// *RefusedProgramError that says why.
func OpenProgram(p string) (*os.File, error) {
	// O_NONBLOCK: a FIFO in its place must not hang the open.
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	const own = "install it owned by root (or yourself) and writable only by its owner"
	why, fix := "", own
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "it is not a regular file"
	case st.Mode&0o111 == 0:
		why, fix = "it is not executable", "chmod 0755 "+p
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		why = fmt.Sprintf("it is owned by uid %d, neither root nor this user (uid %d)", st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		why = fmt.Sprintf("its mode %04o lets other users change it", st.Mode&0o7777)
	case noexec(f):
		why, fix = "it lies on a file system mounted noexec", "install it on a file system mounted without noexec"
	case unix.Faccessat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.X_OK, unix.AT_EACCESS) != nil:
		// Its x bits are not this user's, or a security module forbids
		// it: the exec would fail.
		why, fix = "this user may not execute it", "make it executable by this user (mode 0755)"
	}
	if why != "" {
		f.Close()
		return nil, &RefusedProgramError{Path: p, Why: why, Fix: fix}
	}
	return f, nil
}

// noexec reports whether f lies on a mount with the noexec flag.
func noexec(f *os.File) bool {
	var fs unix.Statfs_t
	return unix.Fstatfs(int(f.Fd()), &fs) == nil && fs.Flags&unix.ST_NOEXEC != 0
}

// RefusedProgramError is a program OpenProgram refuses to execute.
type RefusedProgramError struct {
	Path, Why string
	// Fix is the change that makes the file acceptable.
	Fix string
}

func (e *RefusedProgramError) Error() string { return e.Path + ": " + e.Why }
