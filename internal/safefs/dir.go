package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Dir is an open directory: a descriptor (O_RDONLY|O_DIRECTORY|O_CLOEXEC,
// or O_PATH for a directory the caller may search but not read, which is
// enough to work below it but not to list it or change its metadata),
// the path it was opened as, and its identity when it was opened. The path
// is for messages and records only: the directory may have been renamed
// since, and nothing here resolves it again. A Dir is not safe for
// concurrent Close; its other methods may be called concurrently.
type Dir struct {
	fd   int
	path string
	id   FileID
}

// newDir takes ownership of fd and checks that it is a directory.
func newDir(fd int, path string) (*Dir, error) {
	st, err := fstat(fd)
	if err != nil {
		unix.Close(fd)
		return nil, pathErr("fstat", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return nil, pathErr("open", path, unix.ENOTDIR)
	}
	fsid, err := fstatfsID(fd)
	if err != nil {
		unix.Close(fd)
		return nil, pathErr("fstatfs", path, err)
	}
	return &Dir{fd: fd, path: path, id: FileID{Dev: st.Dev, Ino: st.Ino, FSID: fsid}}, nil
}

// OpenDir opens the directory at the absolute path without following a
// symbolic link in any component (openat2 RESOLVE_NO_SYMLINKS and
// RESOLVE_NO_MAGICLINKS from "/"). A symbolic link anywhere on the way is
// an error matching ErrSymlink that names it.
func OpenDir(path string) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, pathErr("open", path, fmt.Errorf("not an absolute path: %w", unix.EINVAL))
	}
	path = filepath.Clean(path)
	fd, err := openat2(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY, 0, noLinks)
	if err == unix.EACCES {
		fd, err = openat2(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY, 0, noLinks)
	}
	if err != nil {
		return nil, openErr(path, "/", path, err)
	}
	return newDir(fd, path)
}

// OpenDirFollowing opens the directory at the absolute path the ordinary
// way, following symbolic links in the components leading to it, but not
// a final one. It is for a path the caller vouches for and only reads
// below, such as a recorded tree or a view reached through /proc/PID/root;
// everything below it is then opened with the Dir's methods.
func OpenDirFollowing(path string) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, pathErr("open", path, fmt.Errorf("not an absolute path: %w", unix.EINVAL))
	}
	fd, err := openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if fi, lerr := os.Lstat(path); err == unix.ELOOP || err == unix.ENOTDIR && lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("open %s: it is a symbolic link, which hostfork does not follow here: %w", path, ErrSymlink)
		}
		return nil, pathErr("open", path, err)
	}
	return newDir(fd, path)
}

// Fd returns the descriptor. It stays owned by d.
func (d *Dir) Fd() int { return d.fd }

// Path returns the path d was opened as.
func (d *Dir) Path() string { return d.path }

// ID returns d's identity when it was opened.
func (d *Dir) ID() FileID { return d.id }

// Stat returns a fresh fstat of d.
func (d *Dir) Stat() (unix.Stat_t, error) {
	st, err := fstat(d.fd)
	if err != nil {
		return st, pathErr("fstat", d.path, err)
	}
	return st, nil
}

// FSType returns the magic number (statfs' f_type) of d's filesystem.
func (d *Dir) FSType() (int64, error) {
	var sf unix.Statfs_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatfs(d.fd, &sf) }); err != nil {
		return 0, err
	}
	return int64(sf.Type), nil
}

// Close closes the descriptor. Closing a closed or nil Dir does nothing.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	if err != nil {
		return pathErr("close", d.path, err)
	}
	return nil
}

func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

// OpenDir opens the directory name below d: one component or several,
// never escaping d (RESOLVE_BENEATH) and never following a symbolic link.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	if err := checkRel(d, name); err != nil {
		return nil, err
	}
	fd, err := openat2(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, unix.RESOLVE_BENEATH|noLinks)
	if err == unix.EACCES {
		fd, err = openat2(d.fd, name, unix.O_PATH|unix.O_DIRECTORY, 0, unix.RESOLVE_BENEATH|noLinks)
	}
	if err != nil {
		return nil, openErr(d.join(name), d.path, name, err)
	}
	return newDir(fd, d.join(name))
}

// OpenFile opens name below d like os.OpenFile, with O_NOFOLLOW and
// O_CLOEXEC added, never escaping d and never following a symbolic link.
// perm is used, less the umask, only when flag has O_CREATE; with O_EXCL
// an existing name is ErrExists.
func (d *Dir) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	if err := checkRel(d, name); err != nil {
		return nil, err
	}
	fd, err := openat2(d.fd, name, flag|unix.O_NOFOLLOW, unixPerm(perm), unix.RESOLVE_BENEATH|noLinks)
	if err != nil {
		if err == unix.EEXIST && flag&unix.O_EXCL != 0 {
			return nil, fmt.Errorf("creating %s: %w", d.join(name), ErrExists)
		}
		return nil, openErr(d.join(name), d.path, name, err)
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// CreateExclusive creates the regular file name below d (O_CREAT|O_EXCL|
// O_NOFOLLOW, read-write) and gives it exactly perm, whatever the umask.
// An existing name, a symbolic link included, is ErrExists.
func (d *Dir) CreateExclusive(name string, perm os.FileMode) (*os.File, error) {
	f, err := d.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Fchmod(int(f.Fd()), unixPerm(perm)) }); err != nil {
		f.Close()
		return nil, pathErr("fchmod", f.Name(), err)
	}
	return f, nil
}

// MkdirExclusive creates the directory name (one component) in d and
// returns it open. An existing name is ErrExists. As with os.Mkdir, the
// setuid, setgid and sticky bits of perm are os.ModeSetuid, os.ModeSetgid
// and os.ModeSticky (0o2000 in an os.FileMode is not setgid). The new directory is
// made 0700, opened with O_NOFOLLOW and checked to be a directory owned by
// the effective user — and, where others can write d, an empty one — so
// a name swapped between the mkdir and the open is refused with
// ErrUntrusted, not adopted; then it is given exactly perm with fchmod,
// whatever the umask.
func (d *Dir) MkdirExclusive(name string, perm os.FileMode) (*Dir, error) {
	if err := checkName(d, name); err != nil {
		return nil, err
	}
	full := d.join(name)
	if err := linux.IgnoringEINTR(func() error { return unix.Mkdirat(d.fd, name, 0o700) }); err != nil {
		if err == unix.EEXIST {
			return nil, fmt.Errorf("creating directory %s: %w", full, ErrExists)
		}
		return nil, pathErr("mkdirat", full, err)
	}
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return nil, fmt.Errorf("new directory %s was replaced before it could be opened: %w", full, ErrUntrusted)
		}
		return nil, pathErr("open", full, err)
	}
	nd, err := newDir(fd, full)
	if err != nil {
		return nil, err
	}
	st, err := nd.Stat()
	if err == nil && int(st.Uid) != os.Geteuid() {
		err = fmt.Errorf("new directory %s was replaced by one owned by uid %d: %w", full, st.Uid, ErrUntrusted)
	}
	// Where others can write the parent, a directory already holding
	// something was swapped in for ours. In a private parent only this
	// user's own processes can add to it, and may already have: it is
	// ours.
	if err == nil && d.CheckPrivate() != nil {
		var names []string
		if names, err = nd.ReadNames(); err == nil && len(names) > 0 {
			err = fmt.Errorf("new directory %s was replaced by a directory holding %q: %w", full, names[0], ErrUntrusted)
		}
	}
	if err == nil {
		if e := linux.IgnoringEINTR(func() error { return unix.Fchmod(fd, unixPerm(perm)) }); e != nil {
			err = pathErr("fchmod", full, e)
		}
	}
	if err != nil {
		nd.Close()
		return nil, err
	}
	return nd, nil
}

// EnsurePrivateDir opens the existing directory name (one component) in d
// or, when there is none, creates it with MkdirExclusive(name, perm).
// It refuses (ErrSymlink, ErrUntrusted) a symbolic link, and a directory
// that isn't owned by the effective user or root or that its group or
// others can write: such a directory is someone else's to fill or swap.
// The allocation areas (<store>/trees, .hostfork-trees beside a
// baseline) are made with it. perm must not grant group or other write.
func (d *Dir) EnsurePrivateDir(name string, perm os.FileMode) (*Dir, error) {
	if perm&0o022 != 0 {
		return nil, pathErr("mkdir", d.join(name), fmt.Errorf("mode %v is writable by others: %w", perm, unix.EINVAL))
	}
	if err := checkName(d, name); err != nil {
		return nil, err
	}
	for range 8 {
		sub, err := d.OpenDir(name)
		if err == nil {
			if err := sub.CheckPrivate(); err != nil {
				sub.Close()
				return nil, fmt.Errorf("%w (or remove it, and hostfork will create it private)", err)
			}
			return sub, nil
		}
		if errors.Is(err, ErrSymlink) {
			return nil, fmt.Errorf("%w; remove it and hostfork will create the directory itself", err)
		}
		if errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%w; remove it and hostfork will create the directory itself", err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		sub, err = d.MkdirExclusive(name, perm)
		if !errors.Is(err, ErrExists) {
			return sub, err
		}
		// Someone made it between our open and our mkdir: look again.
	}
	return nil, fmt.Errorf("%s keeps appearing and disappearing: %w", d.join(name), ErrUntrusted)
}

// CheckPrivate refuses d (ErrUntrusted) unless it is owned by the
// effective user or root and its group and others can't write it.
func (d *Dir) CheckPrivate() error {
	st, err := d.Stat()
	if err != nil {
		return err
	}
	return trusted(entry{path: d.path, mode: st.Mode, uid: st.Uid}, os.Geteuid(), false)
}

// Lstat returns the fstatat(AT_SYMLINK_NOFOLLOW) of name (one component)
// in d.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkName(d, name); err != nil {
		return st, err
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return st, pathErr("lstat", d.join(name), err)
	}
	return st, nil
}

// Lchmod sets the permission bits of name (one component) in d without
// following it if it is a symbolic link (fchmodat2 AT_SYMLINK_NOFOLLOW;
// before Linux 6.6, through an O_PATH descriptor of name itself). A
// symbolic link has no mode of its own: that is EOPNOTSUPP.
func (d *Dir) Lchmod(name string, perm os.FileMode) error {
	if err := checkName(d, name); err != nil {
		return err
	}
	mode := unixPerm(perm)
	err := linux.IgnoringEINTR(func() error { return unix.Fchmodat(d.fd, name, mode, unix.AT_SYMLINK_NOFOLLOW) })
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		// Either a symbolic link, or a kernel without fchmodat2.
		fd, oerr := openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if oerr != nil {
			return pathErr("open", d.join(name), oerr)
		}
		defer unix.Close(fd)
		st, serr := fstat(fd)
		switch {
		case serr != nil:
			err = serr
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			err = unix.EOPNOTSUPP
		default:
			// The magic link names exactly the inode fd holds.
			err = linux.IgnoringEINTR(func() error { return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0) })
		}
	}
	if err != nil {
		return pathErr("chmod", d.join(name), err)
	}
	return nil
}

// Lchown sets the owner and group of name (one component) in d without
// following it if it is a symbolic link.
func (d *Dir) Lchown(name string, uid, gid int) error {
	if err := checkName(d, name); err != nil {
		return err
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return pathErr("chown", d.join(name), err)
	}
	return nil
}

// Rename renames oldName in d to newName in to (one component each),
// never replacing anything (renameat2 RENAME_NOREPLACE): an existing
// newName is ErrExists.
func (d *Dir) Rename(oldName string, to *Dir, newName string) error {
	if err := checkName(d, oldName); err != nil {
		return err
	}
	if err := checkName(to, newName); err != nil {
		return err
	}
	err := linux.IgnoringEINTR(func() error { return unix.Renameat2(d.fd, oldName, to.fd, newName, unix.RENAME_NOREPLACE) })
	if err == unix.EEXIST {
		return fmt.Errorf("renaming %s to %s: %w", d.join(oldName), to.join(newName), ErrExists)
	}
	if err != nil {
		return &os.LinkError{Op: "renameat2", Old: d.join(oldName), New: to.join(newName), Err: err}
	}
	return nil
}

// ReadNames returns the names in d, from its start, without "." and "..".
func (d *Dir) ReadNames() ([]string, error) { return readNames(d.fd, d.path) }

func readNames(fd int, path string) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, pathErr("lseek", path, err)
	}
	buf := make([]byte, 16<<10)
	var names []string
	for {
		n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return nil, pathErr("getdents64", path, err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// checkRel accepts a relative name of one or more components that stays
// below its directory lexically.
func checkRel(d *Dir, name string) error {
	if name == "" || filepath.IsAbs(name) || !filepath.IsLocal(name) || strings.IndexByte(name, 0) >= 0 {
		return pathErr("open", d.join(name), fmt.Errorf("%q is not a relative name below %s: %w", name, d.path, unix.EINVAL))
	}
	return nil
}

// checkName accepts exactly one path component.
func checkName(d *Dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return pathErr("open", d.join(name), fmt.Errorf("%q is not a single name: %w", name, unix.EINVAL))
	}
	return nil
}

// openErr describes a failed openat2 of full (base joined with rel).
func openErr(full, base, rel string, err error) error {
	switch err {
	case unix.ELOOP:
		return symlinkErr(full, base, rel)
	case unix.EXDEV:
		return pathErr("open", full, fmt.Errorf("the name escapes %s: %w", base, err))
	}
	return pathErr("open", full, err)
}

// symlinkErr names the first symbolic link on the way from base to rel.
// It looks by path, for the message only; the refusal already happened.
func symlinkErr(full, base, rel string) error {
	p := base
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			break
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			what := "a symbolic link"
			if p == full {
				what = "itself a symbolic link"
			}
			return fmt.Errorf("open %s: %s is %s (to %q), which hostfork does not follow here; name the real directory instead: %w",
				full, p, what, target, ErrSymlink)
		}
	}
	return fmt.Errorf("open %s: a component is a symbolic link, which hostfork does not follow here: %w", full, ErrSymlink)
}

// unixPerm converts the permission bits of an os.FileMode to st_mode bits.
func unixPerm(m os.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		p |= unix.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		p |= unix.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		p |= unix.S_ISVTX
	}
	return p
}

// FileMode converts st_mode permission and type bits to an os.FileMode.
func FileMode(mode uint32) os.FileMode {
	m := os.FileMode(mode & 0o777)
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= os.ModeDir
	case unix.S_IFLNK:
		m |= os.ModeSymlink
	case unix.S_IFIFO:
		m |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= os.ModeSocket
	case unix.S_IFCHR:
		m |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		m |= os.ModeDevice
	}
	return m
}
