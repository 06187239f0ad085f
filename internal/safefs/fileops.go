package safefs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenPathDir opens the directory at path as an O_PATH descriptor, without
// following a symbolic link in its last component: a handle that names
// the directory itself for the *at calls below.
func OpenPathDir(path string) (*os.File, error) {
	return os.OpenFile(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// OpenUnnamed makes an unnamed file (O_TMPFILE, mode 0600) in the
// directory dir with the extra open flags flag; name is only its name in
// os.File. The error names dir.
func OpenUnnamed(dir *os.File, name string, flag int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_TMPFILE|unix.O_CLOEXEC|flag, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir.Name(), Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// LinkUnnamed gives the unnamed file f the name name in dir, through its
// /proc link (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH). It fails if
// the name exists.
func LinkUnnamed(f, dir *os.File, name string) error {
	return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), int(dir.Fd()), name, unix.AT_SYMLINK_FOLLOW)
}

// Preallocate allocates the first n bytes of f's blocks without changing
// its size (fallocate FALLOC_FL_KEEP_SIZE), so that rewriting them in
// place can't fail for space later. Best effort: it reports the error.
func Preallocate(f *os.File, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n)
}

// IDOf is the device and inode of the open file f.
func IDOf(f *os.File) (FileID, error) {
	st, err := fstat(int(f.Fd()))
	if err != nil {
		return FileID{}, err
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// RemoveEmptyDir removes the empty directory at path (rmdir(2)): never a
// file, never a directory with anything in it.
func RemoveEmptyDir(path string) error { return unix.Rmdir(path) }
