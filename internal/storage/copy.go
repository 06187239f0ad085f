package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// ReflinkMode selects how a copy moves file data.
type ReflinkMode string

const (
	// ReflinkAuto clones each file with FICLONE where the filesystem
	// supports it and copies the data otherwise (copy_file_range, then
	// read/write). The result reports which happened.
	ReflinkAuto ReflinkMode = ""
	// ReflinkAlways fails with ErrReflinkUnsupported unless every file
	// can be cloned.
	ReflinkAlways ReflinkMode = "always"
	// ReflinkNever copies every byte with read/write, so the copy shares
	// no extents with its source (copy_file_range may share them).
	ReflinkNever ReflinkMode = "never"
)

// ReflinkResult reports whether a copy's regular files were cloned.
type ReflinkResult string

// Reflink results. A tree without regular files reports ReflinkNone.
const (
	ReflinkAll     ReflinkResult = "all"
	ReflinkPartial ReflinkResult = "partial"
	ReflinkNone    ReflinkResult = "none"
)

// Copy is the copy backend: Prepare copies the source directory to
// Dest/tree preserving file types, modes, symlinks, hard links, times and,
// as root, ownership; extended attributes are not copied. Data is cloned
// (FICLONE) where the filesystem allows it. A copy of a live directory is
// not atomic: files are copied one by one.
type Copy struct{}

var _ Backend = Copy{}

// Kind returns KindCopy.
func (Copy) Kind() Kind { return KindCopy }

// Prepare copies req.Source to req.Dest/tree.
func (Copy) Prepare(ctx context.Context, req Request) (Tree, error) {
	if err := checkRequest(KindCopy, req); err != nil {
		return Tree{}, err
	}
	switch req.Reflink {
	case ReflinkAuto, ReflinkAlways, ReflinkNever:
	default:
		return Tree{}, fmt.Errorf("copy tree: reflink mode %q: %w", req.Reflink, ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return Tree{}, fmt.Errorf("preparing copy tree: %w", err)
	}
	src, err := openSource(KindCopy, req)
	if err != nil {
		return Tree{}, err
	}
	defer src.Close()
	parent, dest, err := newDest(KindCopy, req, src, nil)
	if err != nil {
		return Tree{}, err
	}
	defer parent.Close()
	defer dest.Close()
	t := Tree{Kind: KindCopy, Dest: req.Dest, DestID: dest.ID(), Path: filepath.Join(req.Dest, treeDirName)}
	fail := func(err error) (Tree, error) {
		// Dest was created exclusively above: everything in it is ours.
		if rerr := removeDest(parent, t); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the failed copy: %w", rerr))
		}
		return Tree{}, fmt.Errorf("copying %s: %w", req.Source, err)
	}
	tree, err := dest.MkdirExclusive(treeDirName, 0o700)
	if err != nil {
		return fail(err)
	}
	defer tree.Close()
	c := newCopier(ctx, req.Reflink, tree)
	if err := c.copyInto(src, tree); err != nil {
		return fail(err)
	}
	t.Copy = c.result(req.Source, t.Path, tree.ID())
	return t, nil
}

// copier copies a directory's contents by descriptors: every source entry
// is reached with fstatat/openat O_NOFOLLOW relative to its directory's
// descriptor, every destination entry is created relative to its
// parent's descriptor (mkdirat, openat O_CREAT|O_EXCL, symlinkat, linkat,
// mknodat), and metadata is set on descriptors (fchown, fchmod, futimens)
// or, for symbolic links and special files, relative to the parent with
// AT_SYMLINK_NOFOLLOW. No path is resolved twice, so a name swapped for a
// symbolic link during the copy can't redirect a write.
type copier struct {
	ctx  context.Context
	mode ReflinkMode
	root bool
	// top is the destination directory the copy fills; hard links are
	// made relative to it. links maps the (dev, ino) of a multiply linked
	// source file to its first copy's path below top.
	top   *safefs.Dir
	links map[[2]uint64]string
	n     int

	files, cloned, bytes int64

	// overlayXattrs: copy the trusted.overlay.* attributes of
	// directories and files too (an overlay upper's opaque and redirect
	// marks), and user.overlay.* (a rootless overlay's, mounted with
	// userxattr), for a fork's copy of an upper.
	overlayXattrs bool

	// skipTop: a name at the top of the source that is not copied (a
	// worktree's own .git, for a fork of a worktree).
	skipTop string

	// tolerate: record per-entry errors (failed, errs) and go on.
	tolerate bool
	failed   int64
	errs     []string
	progress func(files, bytes int64)
}

func newCopier(ctx context.Context, mode ReflinkMode, top *safefs.Dir) *copier {
	return &copier{ctx: ctx, mode: mode, root: os.Geteuid() == 0, top: top, links: map[[2]uint64]string{}}
}

// copyInto copies the contents of src into dst, an empty directory the
// copy created, then gives dst src's ownership, mode and times.
func (c *copier) copyInto(src, dst *safefs.Dir) error {
	if err := c.copyDir(src, dst, ""); err != nil {
		return err
	}
	st, err := src.Stat()
	if err == nil {
		err = c.copyXattrs(src.Fd(), dst.Fd(), dst.Path())
	}
	if err == nil {
		err = c.setMeta(dst.Fd(), dst.Path(), &st)
	}
	return c.tolerated(err)
}

// tolerated lets a tolerant copy record a per-entry error and go on
// (skipping a directory it could not create); a strict copy stops, and
// so does a cancelled one.
func (c *copier) tolerated(err error) error {
	if err == nil || !c.tolerate || c.ctx.Err() != nil {
		return err
	}
	c.failed++
	if len(c.errs) < 20 {
		c.errs = append(c.errs, err.Error())
	}
	return nil
}

// copyDir copies the entries of src into dst; rel is dst's path below
// c.top.
func (c *copier) copyDir(src, dst *safefs.Dir, rel string) error {
	names, err := src.ReadNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		if rel == "" && name == c.skipTop {
			continue
		}
		if err := c.tolerated(c.copyEntry(src, dst, name, path.Join(rel, name))); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) copyEntry(src, dst *safefs.Dir, name, rel string) error {
	if c.n++; c.n%256 == 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
	}
	srcPath := filepath.Join(src.Path(), name)
	var st unix.Stat_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatat(src.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return &os.PathError{Op: "lstat", Path: srcPath, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return c.copySubdir(src, dst, name, rel)
	case unix.S_IFREG:
		if done, err := c.linkAgain(&st, dst, name, rel); done {
			return err
		}
		return c.copyFile(src, dst, name, rel)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Readlinkat(src.Fd(), name, buf) })
		if err != nil {
			return &os.PathError{Op: "readlink", Path: srcPath, Err: err}
		}
		target := string(buf[:n])
		if err := linux.IgnoringEINTR(func() error { return unix.Symlinkat(target, dst.Fd(), name) }); err != nil {
			return &os.PathError{Op: "symlink", Path: filepath.Join(dst.Path(), name), Err: err}
		}
		return c.setMetaAt(dst, name, &st, true)
	default: // fifo, socket, character or block device
		if done, err := c.linkAgain(&st, dst, name, rel); done {
			return err
		}
		if err := linux.IgnoringEINTR(func() error { return unix.Mknodat(dst.Fd(), name, st.Mode&^0o7777|0o600, int(st.Rdev)) }); err != nil {
			return &os.PathError{Op: "mknod", Path: filepath.Join(dst.Path(), name), Err: err}
		}
		if err := c.setMetaAt(dst, name, &st, false); err != nil {
			return err
		}
		c.linked(&st, rel)
		return nil
	}
}

func (c *copier) copySubdir(src, dst *safefs.Dir, name, rel string) error {
	s, err := src.OpenDir(name)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.ID().Dev == c.top.ID().Dev && s.ID().Ino == c.top.ID().Ino {
		return nil // the copy itself, moved into the source meanwhile: not copied into itself
	}
	d, err := dst.MkdirExclusive(name, 0o700)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := c.copyDir(s, d, rel); err != nil {
		return err
	}
	// Metadata last, so that writing the contents doesn't change the
	// copied mtime or meet a read-only mode. The opened directory's own
	// fstat is authoritative: the name may have been swapped since.
	st, err := s.Stat()
	if err != nil {
		return err
	}
	if err := c.copyXattrs(s.Fd(), d.Fd(), d.Path()); err != nil {
		return err
	}
	return c.setMeta(d.Fd(), d.Path(), &st)
}

// copyXattrs copies the trusted.overlay.* attributes of sfd to dfd when
// the copier is asked to (c.overlayXattrs); otherwise it does nothing.
func (c *copier) copyXattrs(sfd, dfd int, path string) error {
	if !c.overlayXattrs {
		return nil
	}
	names, err := listXattrs(sfd)
	if err != nil {
		return &os.PathError{Op: "flistxattr", Path: path, Err: err}
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "trusted.overlay.") && !strings.HasPrefix(n, "user.overlay.") {
			continue
		}
		v, err := getXattr(sfd, n)
		if err != nil {
			return &os.PathError{Op: "fgetxattr " + n, Path: path, Err: err}
		}
		if err := linux.IgnoringEINTR(func() error { return unix.Fsetxattr(dfd, n, v, 0) }); err != nil {
			return &os.PathError{Op: "fsetxattr " + n, Path: path, Err: err}
		}
	}
	return nil
}

// linkAgain makes name in dst a hard link to the first copy of a multiply
// linked source file already copied, and reports whether it did (or
// failed trying).
func (c *copier) linkAgain(st *unix.Stat_t, dst *safefs.Dir, name, rel string) (bool, error) {
	if st.Nlink < 2 {
		return false, nil
	}
	first, ok := c.links[[2]uint64{st.Dev, st.Ino}]
	if !ok {
		return false, nil
	}
	from := c.top
	dir, base := path.Split(first)
	if dir != "" {
		d, err := c.top.OpenDir(path.Clean(dir))
		if err != nil {
			return true, err
		}
		defer d.Close()
		from = d
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Linkat(from.Fd(), base, dst.Fd(), name, 0) }); err != nil {
		return true, &os.LinkError{Op: "link", Old: filepath.Join(from.Path(), base), New: filepath.Join(dst.Path(), name), Err: err}
	}
	return true, nil
}

// linked remembers the copy of a multiply linked file at rel.
func (c *copier) linked(st *unix.Stat_t, rel string) {
	if st.Nlink > 1 {
		c.links[[2]uint64{st.Dev, st.Ino}] = rel
	}
}

// setMeta applies ownership (as root), mode and times of st to the file
// open as fd.
func (c *copier) setMeta(fd int, path string, st *unix.Stat_t) error {
	if c.root {
		if err := linux.IgnoringEINTR(func() error { return unix.Fchown(fd, int(st.Uid), int(st.Gid)) }); err != nil {
			return &os.PathError{Op: "fchown", Path: path, Err: err}
		}
	}
	// After chown, which clears setuid/setgid.
	if err := linux.IgnoringEINTR(func() error { return unix.Fchmod(fd, st.Mode&0o7777) }); err != nil {
		return &os.PathError{Op: "fchmod", Path: path, Err: err}
	}
	if err := safefs.Futimens(fd, st.Atim, st.Mtim); err != nil {
		return &os.PathError{Op: "futimens", Path: path, Err: err}
	}
	return nil
}

// setMetaAt applies ownership (as root), mode (not for a symbolic link)
// and times of st to name in dst, never following name.
func (c *copier) setMetaAt(dst *safefs.Dir, name string, st *unix.Stat_t, symlink bool) error {
	p := filepath.Join(dst.Path(), name)
	if c.root {
		if err := linux.IgnoringEINTR(func() error {
			return unix.Fchownat(dst.Fd(), name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
		}); err != nil {
			return &os.PathError{Op: "lchown", Path: p, Err: err}
		}
	}
	if !symlink {
		if err := dst.Lchmod(name, safefs.FileMode(st.Mode&0o7777)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := linux.IgnoringEINTR(func() error { return unix.UtimesNanoAt(dst.Fd(), name, ts, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return &os.PathError{Op: "utimensat", Path: p, Err: err}
	}
	return nil
}

func (c *copier) copyFile(src, dst *safefs.Dir, name, rel string) error {
	srcPath := filepath.Join(src.Path(), name)
	// O_NONBLOCK: a name swapped for a fifo must not hang the copy.
	sfd, err := linux.IgnoringEINTR2(func() (int, error) {
		return unix.Openat(src.Fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return &os.PathError{Op: "open", Path: srcPath, Err: err}
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstat(sfd, &st) }); err != nil {
		return &os.PathError{Op: "fstat", Path: srcPath, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &os.PathError{Op: "open", Path: srcPath, Err: fmt.Errorf("no longer a regular file (changed during the copy)")}
	}
	// Exclusive, never following; setMeta gives it its mode.
	f, err := dst.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	dfd := int(f.Fd())
	err = c.copyData(sfd, dfd, srcPath, f.Name())
	if err == nil {
		err = c.copyXattrs(sfd, dfd, f.Name())
	}
	if err == nil {
		err = c.setMeta(dfd, f.Name(), &st)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		// A file cut short (a full filesystem, a read error) must not be
		// left looking whole: it is removed, and the copy says it failed.
		_ = unix.Unlinkat(dst.Fd(), name, 0)
		return err
	}
	c.linked(&st, rel)
	c.files++
	c.bytes += st.Size
	if c.progress != nil {
		c.progress(c.files, c.bytes)
	}
	return nil
}

// copyData moves the data of sfd to dfd: a clone, copy_file_range, or
// read/write, as the mode and the filesystem allow.
func (c *copier) copyData(sfd, dfd int, src, dst string) error {
	if c.mode != ReflinkNever {
		err := linux.IgnoringEINTR(func() error { return unix.IoctlFileClone(dfd, sfd) })
		if err == nil {
			c.cloned++
			return nil
		}
		if c.mode == ReflinkAlways {
			return fmt.Errorf("cloning %s to %s: %w: %w", src, dst, &os.PathError{Op: "ioctl FICLONE", Path: dst, Err: err}, ErrReflinkUnsupported)
		}
		// Any failure to clone (EOPNOTSUPP, EXDEV, EINVAL, …) falls back
		// to copying; a real I/O problem shows up again there.
		copied := false
		for {
			n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.CopyFileRange(sfd, nil, dfd, nil, 1<<30, 0) })
			if err != nil {
				if copied || !(errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) ||
					errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)) {
					return &os.PathError{Op: "copy_file_range", Path: dst, Err: err}
				}
				break // nothing written yet: read/write below
			}
			if n == 0 {
				return nil
			}
			copied = true
		}
	}
	buf := make([]byte, 128*1024)
	for {
		n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Read(sfd, buf) })
		if err != nil {
			return &os.PathError{Op: "read", Path: src, Err: err}
		}
		if n == 0 {
			return nil
		}
		for w := 0; w < n; {
			m, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Write(dfd, buf[w:n]) })
			if err != nil {
				return &os.PathError{Op: "write", Path: dst, Err: err}
			}
			w += m
		}
	}
}

func (Copy) check(t Tree) error {
	if err := checkTree(KindCopy, t); err != nil {
		return err
	}
	if t.Copy == nil || t.Copy.DirID.Ino == 0 || t.Copy.Dir != filepath.Join(t.Dest, treeDirName) || t.Path != t.Copy.Dir {
		return fmt.Errorf("copy tree record at %s is incomplete: %w", t.Dest, ErrInvalidRequest)
	}
	return nil
}

// Mounts returns a bind mount of the copy.
func (cp Copy) Mounts(t Tree) ([]Mount, error) {
	if err := cp.check(t); err != nil {
		return nil, err
	}
	return []Mount{{Type: "bind", Source: t.Copy.Dir, Options: []string{"bind"}}}, nil
}

// Verify checks the destination and the copy's directory.
func (cp Copy) Verify(ctx context.Context, t Tree) error { return closed(cp.Open(ctx, t)) }

// Remove deletes the copy and the destination.
func (cp Copy) Remove(ctx context.Context, t Tree) error {
	return removeTree(ctx, t, cp.check, func(dest *safefs.Dir) error {
		return partsThere(dest, part{"copy", treeDirName, t.Copy.DirID})
	}, nil)
}

// listXattrs returns the names of fd's extended attributes.
func listXattrs(fd int) ([]string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Flistxattr(fd, buf) })
		if errors.Is(err, unix.ERANGE) && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(strings.Split(string(buf[:n]), "\x00"), func(name string) bool { return name == "" }), nil
	}
}

// getXattr returns the value of fd's attribute name.
func getXattr(fd int, name string) ([]byte, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := linux.IgnoringEINTR2(func() (int, error) { return unix.Fgetxattr(fd, name, buf) })
		if errors.Is(err, unix.ERANGE) && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
