package safefs

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Root is a directory that stands for "/" of a view of the filesystem: an
// environment's mount namespace, reached through its keeper's
// /proc/PID/root, or the host's own "/". Every name is resolved inside it
// with openat2 RESOLVE_IN_ROOT, so ".." and absolute symbolic links stop
// at the root instead of leaving it, and magic links (/proc/PID/fd/N,
// /proc/PID/root) are refused; the mounts are the view's. Symbolic links
// are followed inside the view on the way, but a name that is itself a
// symbolic link is never written through: WriteFile replaces the link.
type Root struct {
	fd   int
	name string // for messages
}

const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// NewRoot takes over f, a directory (O_PATH is enough), as a Root.
func NewRoot(f *os.File, name string) (*Root, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	return &Root{fd: fd, name: name}, nil
}

// OpenRoot opens path (following links, as the caller names it) as a Root.
func OpenRoot(p string) (*Root, error) {
	fd, err := openat(unix.AT_FDCWD, p, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	return &Root{fd: fd, name: p}, nil
}

// Close releases the root.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	fd := r.fd
	r.fd = -1
	return unix.Close(fd)
}

// Clean makes name an absolute, clean path of the view.
func Clean(name string) string { return path.Clean("/" + name) }

// Entry is what Stat and ReadDir say of one name.
type Entry struct {
	// Path is the name, relative to the directory ReadDir lists (or the
	// clean absolute name for Stat).
	Path    string
	Type    string // file, dir, symlink or other
	Size    int64
	Mode    os.FileMode
	ModTime time.Time
	UID     uint32
	GID     uint32
	Target  string // a symbolic link's target
}

func entryOf(p string, st *unix.Stat_t) Entry {
	e := Entry{Path: p, Size: st.Size, Mode: FileMode(st.Mode), ModTime: time.Unix(st.Mtim.Unix()), UID: st.Uid, GID: st.Gid}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "dir"
	case unix.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	return e
}

// viewErr describes a failed lookup of name in the view.
func (r *Root) viewErr(op, name string, err error) error {
	switch err {
	case unix.ELOOP:
		return pathErr(op, name, fmt.Errorf("too many symbolic links, or a magic link (/proc/PID/...), which is not followed in an environment's view: %w", ErrSymlink))
	case unix.EXDEV:
		return pathErr(op, name, fmt.Errorf("the name leaves the view: %w", err))
	}
	return pathErr(op, name, err)
}

// Open opens name for reading (a regular file or a directory).
func (r *Root) Open(name string) (*os.File, error) {
	name = Clean(name)
	fd, err := openat2(r.fd, name, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0, inRoot)
	if err != nil {
		return nil, r.viewErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	st, err := fstat(fd)
	if err != nil {
		f.Close()
		return nil, pathErr("stat", name, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		f.Close()
		return nil, pathErr("open", name, errors.New("not a regular file or a directory"))
	}
	// Blocking reads again (O_NONBLOCK only kept a FIFO from hanging the
	// open).
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, os.NewSyscallError("fcntl", err)
	}
	return f, nil
}

// OpenPath opens name as an O_PATH descriptor (a directory to watch).
func (r *Root) OpenPath(name string, dir bool) (*os.File, error) {
	name = Clean(name)
	flags := unix.O_PATH
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := openat2(r.fd, name, flags, 0, inRoot)
	if err != nil {
		return nil, r.viewErr("open", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Stat describes name, following symbolic links inside the view.
func (r *Root) Stat(name string) (Entry, error) {
	f, err := r.OpenPath(name, false)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	st, err := fstat(int(f.Fd()))
	if err != nil {
		return Entry{}, pathErr("stat", f.Name(), err)
	}
	return entryOf(f.Name(), &st), nil
}

// ErrTooMany reports a listing cut at its bound.
var ErrTooMany = errors.New("too many entries")

// ReadDir lists the directory name: its entries (depth 1), or the whole
// tree below it to depth levels (depth < 1: unlimited), parents before
// their children, each path relative to name. Symbolic links are listed,
// never followed; neither are other mounts' contents skipped. More than
// max entries is ErrTooMany.
func (r *Root) ReadDir(name string, depth, max int) ([]Entry, error) {
	name = Clean(name)
	fd, err := openat2(r.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, inRoot)
	if err != nil {
		return nil, r.viewErr("open", name, err)
	}
	var out []Entry
	err = readDir(fd, name, "", depth, max, &out)
	unix.Close(fd)
	return out, err
}

func readDir(fd int, full, rel string, depth, max int, out *[]Entry) error {
	names, err := readNames(fd, full)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, n := range names {
		if len(*out) >= max {
			return fmt.Errorf("listing %s: more than %d entries (list a subdirectory, or a smaller depth): %w", full, max, ErrTooMany)
		}
		var st unix.Stat_t
		if err := linux.IgnoringEINTR(func() error { return unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
			if err == unix.ENOENT {
				continue // gone meanwhile
			}
			return pathErr("stat", path.Join(full, n), err)
		}
		e := entryOf(path.Join(rel, n), &st)
		if e.Type == "symlink" {
			e.Target = readlinkAt(fd, n)
		}
		*out = append(*out, e)
		if e.Type == "dir" && depth != 1 {
			sub, err := openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			if err != nil {
				if err == unix.EACCES || err == unix.ENOENT {
					continue
				}
				return pathErr("open", path.Join(full, n), err)
			}
			err = readDir(sub, path.Join(full, n), e.Path, depth-1, max, out)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func readlinkAt(fd int, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// ErrNoParent reports a name whose directory does not exist in the view;
// it also matches fs.ErrNotExist.
var ErrNoParent = errors.New("the directory does not exist")

// noParent is ErrNoParent with the directory and the fix.
type noParent struct{ dir string }

func (e noParent) Error() string {
	return fmt.Sprintf("%s is missing or not a directory; create it first (e.g. hostfork exec ENV -- mkdir -p %s)", e.dir, e.dir)
}
func (e noParent) Is(target error) bool { return target == ErrNoParent || target == fs.ErrNotExist }

// parent opens the directory of name (O_PATH) and returns it with the last
// component.
func (r *Root) parent(op, name string) (int, string, error) {
	name = Clean(name)
	dir, base := path.Split(name)
	if base == "" {
		return -1, "", pathErr(op, name, errors.New("the root of the view itself: name a file below it"))
	}
	fd, err := openat2(r.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, inRoot)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		d := path.Clean(dir)
		return -1, "", pathErr(op, name, noParent{d})
	}
	if err != nil {
		return -1, "", r.viewErr(op, name, err)
	}
	return fd, base, nil
}

// WriteFile replaces name's content with everything src gives, as the
// caller (who owns what it creates): into a new file beside it, renamed
// over name at the end, so a reader sees the old content or the new, and a
// symbolic link at name is replaced, never written through. perm 0 keeps
// an existing file's permissions, else 0644; the permissions are exactly
// perm, whatever the umask. An error leaves name as it was.
func (r *Root) WriteFile(name string, src io.Reader, perm os.FileMode) (Entry, error) {
	pfd, base, err := r.parent("write", name)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(pfd)
	name = Clean(name)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return Entry{}, pathErr("write", name, errors.New("is a directory; name a file inside it"))
	case err == nil && perm == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG:
		perm = FileMode(st.Mode).Perm()
	case err != nil && err != unix.ENOENT:
		return Entry{}, pathErr("stat", name, err)
	}
	perm = cmp.Or(perm, 0o644)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + base + ".hostfork-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".hostfork-" + hex.EncodeToString(rnd[:])
	}
	fd, err := openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return Entry{}, pathErr("create", path.Join(path.Dir(name), tmp), err)
	}
	f := os.NewFile(uintptr(fd), name)
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if _, err := io.Copy(f, src); err != nil {
		return Entry{}, fmt.Errorf("writing %s: %w", name, err)
	}
	if err := f.Chmod(perm); err != nil {
		return Entry{}, err
	}
	fst, err := fstat(fd)
	if err != nil {
		return Entry{}, pathErr("stat", name, err)
	}
	if err := f.Close(); err != nil {
		return Entry{}, err
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Renameat(pfd, tmp, pfd, base) }); err != nil {
		return Entry{}, pathErr("rename", name, err)
	}
	done = true
	return entryOf(name, &fst), nil
}

// Mkdir creates the directory name (its parent must exist) with exactly
// perm. An existing directory is ErrExists.
func (r *Root) Mkdir(name string, perm os.FileMode) error {
	pfd, base, err := r.parent("mkdir", name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	name = Clean(name)
	if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
		if err == unix.EEXIST {
			return pathErr("mkdir", name, ErrExists)
		}
		return pathErr("mkdir", name, err)
	}
	fd, err := openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return pathErr("open", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, unixPerm(perm)); err != nil {
		return pathErr("chmod", name, err)
	}
	return nil
}

// Rename moves oldName to newName, both resolved inside the view (their
// directories must exist); an existing newName is replaced as rename(2)
// replaces it (a directory only by an empty one). Neither last component
// is followed: a symbolic link is moved or replaced as itself. A move
// across mounts of the view fails with EXDEV.
func (r *Root) Rename(oldName, newName string) error {
	ofd, obase, err := r.parent("rename", oldName)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := r.parent("rename", newName)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	err = linux.IgnoringEINTR(func() error { return unix.Renameat(ofd, obase, nfd, nbase) })
	switch err {
	case nil:
		return nil
	case unix.EXDEV:
		return &os.LinkError{Op: "rename", Old: Clean(oldName), New: Clean(newName), Err: fmt.Errorf("the two names are on different mounts of the view; copy the file instead: %w", err)}
	case unix.EEXIST, unix.ENOTEMPTY:
		return &os.LinkError{Op: "rename", Old: Clean(oldName), New: Clean(newName), Err: fmt.Errorf("the destination is a directory that is not empty: %w", ErrExists)}
	}
	return &os.LinkError{Op: "rename", Old: Clean(oldName), New: Clean(newName), Err: err}
}

// Remove removes name: a file or a symbolic link (the link itself, never
// what it points to), or a directory with everything below it, walked by
// descriptors as RemoveTree walks (links unlinked, never followed; a
// mount inside is refused with ErrCrossesMount and nothing below it is
// touched). A missing name matches fs.ErrNotExist.
func (r *Root) Remove(name string) error {
	pfd, base, err := r.parent("remove", name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	name = Clean(name)
	err = linux.IgnoringEINTR(func() error { return unix.Unlinkat(pfd, base, 0) })
	if err != unix.EISDIR {
		if err != nil {
			return pathErr("remove", name, err)
		}
		return nil
	}
	fd, err := openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return pathErr("open", name, err)
	}
	defer unix.Close(fd)
	pos, err := statMount(fd, name)
	if err != nil {
		return err
	}
	if ppos, err := statMount(pfd, path.Dir(name)); err == nil && (ppos.mnt != pos.mnt || ppos.dev != pos.dev) {
		return fmt.Errorf("removing %s: it is a mount point of the view; its contents are left alone: %w", name, ErrCrossesMount)
	}
	if err := removeContents(fd, name, pos); err != nil {
		return err
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR) }); err != nil {
		return pathErr("rmdir", name, err)
	}
	return nil
}
