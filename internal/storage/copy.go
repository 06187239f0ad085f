package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
	src, err := filepath.EvalSymlinks(req.Source)
	if err != nil {
		return Tree{}, fmt.Errorf("preparing copy tree: the source must be an existing directory: %w", err)
	}
	if _, _, err := dirID(src); err != nil {
		return Tree{}, fmt.Errorf("preparing copy tree: the source must be an existing directory: %w", err)
	}
	if err := checkNoOverlap(KindCopy, src, req.Dest); err != nil {
		return Tree{}, err
	}
	destID, err := makeDest(KindCopy, req.Dest)
	if err != nil {
		return Tree{}, err
	}
	dir := filepath.Join(req.Dest, treeDirName)
	c := copier{ctx: ctx, mode: req.Reflink, root: os.Geteuid() == 0, links: map[[2]uint64]string{}}
	fail := func(err error) (Tree, error) {
		// Dest was created exclusively above: everything in it is ours.
		_ = os.RemoveAll(req.Dest)
		return Tree{}, fmt.Errorf("copying %s: %w", req.Source, err)
	}
	if err := c.copyTree(src, dir); err != nil {
		return fail(err)
	}
	dirID, _, err := statID(dir)
	if err != nil {
		return fail(err)
	}
	ct := &CopyTree{Source: req.Source, Dir: dir, DirID: dirID, Files: c.files, Cloned: c.cloned, Bytes: c.bytes}
	switch {
	case c.cloned == 0:
		ct.Reflink = ReflinkNone
	case c.cloned == c.files:
		ct.Reflink = ReflinkAll
	default:
		ct.Reflink = ReflinkPartial
	}
	return Tree{Kind: KindCopy, Dest: req.Dest, DestID: destID, Path: dir, Copy: ct}, nil
}

type copier struct {
	ctx   context.Context
	mode  ReflinkMode
	root  bool
	links map[[2]uint64]string // (dev, ino) of a multiply linked source → its copy
	dirs  []dirMeta
	n     int

	files, cloned, bytes int64

	// tolerate: record per-entry errors (failed, errs) and go on.
	tolerate bool
	failed   int64
	errs     []string
	progress func(files, bytes int64)
}

type dirMeta struct {
	path string
	st   unix.Stat_t
}

func (c *copier) copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		return c.tolerated(p, d, c.copyEntry(src, dst, p, err))
	})
	if err != nil {
		return err
	}
	// Directory metadata last, deepest first, so that writing the
	// contents doesn't change a copied mtime or hit a read-only mode.
	for i := len(c.dirs) - 1; i >= 0; i-- {
		if err := c.setMeta(c.dirs[i].path, &c.dirs[i].st, false); err != nil {
			if err = c.tolerated(c.dirs[i].path, nil, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// tolerated lets a tolerant copy record a per-entry error and go on
// (skipping a directory it could not create); a strict copy stops.
func (c *copier) tolerated(p string, d fs.DirEntry, err error) error {
	if err == nil || !c.tolerate || c.ctx.Err() != nil {
		return err
	}
	c.failed++
	if len(c.errs) < 20 {
		c.errs = append(c.errs, err.Error())
	}
	if d != nil && d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

func (c *copier) copyEntry(src, dst, p string, err error) error {
	if err != nil {
		return err
	}
	if c.n++; c.n%256 == 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
	}
	rel, err := filepath.Rel(src, p)
	if err != nil {
		return err
	}
	target := filepath.Join(dst, rel)
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(p, &st) }); err != nil {
		return &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := ignoringEINTR(func() error { return unix.Mkdir(target, 0o700) }); err != nil {
			return &os.PathError{Op: "mkdir", Path: target, Err: err}
		}
		c.dirs = append(c.dirs, dirMeta{target, st})
		return nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := c.links[key]; ok {
				return os.Link(first, target)
			}
			c.links[key] = target
		}
		return c.copyFile(p, target, &st)
	case unix.S_IFLNK:
		dest, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if err := os.Symlink(dest, target); err != nil {
			return err
		}
		return c.setMeta(target, &st, true)
	default: // fifo, socket, character or block device
		if st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := c.links[key]; ok {
				return os.Link(first, target)
			}
			c.links[key] = target
		}
		if err := ignoringEINTR(func() error { return unix.Mknod(target, st.Mode, int(st.Rdev)) }); err != nil {
			return &os.PathError{Op: "mknod", Path: target, Err: err}
		}
		return c.setMeta(target, &st, false)
	}
}

// setMeta applies ownership (as root), mode and times of st to path.
func (c *copier) setMeta(path string, st *unix.Stat_t, symlink bool) error {
	if c.root {
		if err := ignoringEINTR(func() error { return unix.Lchown(path, int(st.Uid), int(st.Gid)) }); err != nil {
			return &os.PathError{Op: "lchown", Path: path, Err: err}
		}
	}
	if !symlink {
		// After chown, which clears setuid/setgid.
		if err := ignoringEINTR(func() error { return unix.Fchmodat(unix.AT_FDCWD, path, st.Mode&0o7777, 0) }); err != nil {
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := ignoringEINTR(func() error {
		return unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return &os.PathError{Op: "utimensat", Path: path, Err: err}
	}
	return nil
}

func (c *copier) copyFile(src, dst string, st *unix.Stat_t) error {
	sfd, err := ignoringEINTR2(func() (int, error) {
		return unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return &os.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	dfd, err := ignoringEINTR2(func() (int, error) {
		return unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	})
	if err != nil {
		return &os.PathError{Op: "create", Path: dst, Err: err}
	}
	err = c.copyData(sfd, dfd, src, dst)
	if err == nil && c.root {
		err = ignoringEINTR(func() error { return unix.Fchown(dfd, int(st.Uid), int(st.Gid)) })
		if err != nil {
			err = &os.PathError{Op: "fchown", Path: dst, Err: err}
		}
	}
	if err == nil {
		err = ignoringEINTR(func() error { return unix.Fchmod(dfd, st.Mode&0o7777) })
		if err != nil {
			err = &os.PathError{Op: "fchmod", Path: dst, Err: err}
		}
	}
	if cerr := unix.Close(dfd); err == nil && cerr != nil {
		err = &os.PathError{Op: "close", Path: dst, Err: cerr}
	}
	if err != nil {
		return err
	}
	c.files++
	c.bytes += st.Size
	if c.progress != nil {
		c.progress(c.files, c.bytes)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := ignoringEINTR(func() error { return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return &os.PathError{Op: "utimensat", Path: dst, Err: err}
	}
	return nil
}

// copyData moves the data of sfd to dfd: a clone, copy_file_range, or
// read/write, as the mode and the filesystem allow.
func (c *copier) copyData(sfd, dfd int, src, dst string) error {
	if c.mode != ReflinkNever {
		err := ignoringEINTR(func() error { return unix.IoctlFileClone(dfd, sfd) })
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
			n, err := ignoringEINTR2(func() (int, error) { return unix.CopyFileRange(sfd, nil, dfd, nil, 1<<30, 0) })
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
		n, err := ignoringEINTR2(func() (int, error) { return unix.Read(sfd, buf) })
		if err != nil {
			return &os.PathError{Op: "read", Path: src, Err: err}
		}
		if n == 0 {
			return nil
		}
		for w := 0; w < n; {
			m, err := ignoringEINTR2(func() (int, error) { return unix.Write(dfd, buf[w:n]) })
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
func (cp Copy) Verify(ctx context.Context, t Tree) error {
	if err := cp.check(t); err != nil {
		return err
	}
	if err := checkID("destination", t.Dest, t.DestID); err != nil {
		return err
	}
	return checkID("copy", t.Copy.Dir, t.Copy.DirID)
}

// Remove deletes the copy and the destination.
func (cp Copy) Remove(ctx context.Context, t Tree) error {
	if err := cp.check(t); err != nil {
		return err
	}
	if err := checkID("destination", t.Dest, t.DestID); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing copy tree: %w", err)
	}
	if err := checkID("copy", t.Copy.Dir, t.Copy.DirID); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing copy tree: %w", err)
	}
	if err := refuseMounts(t.Dest); err != nil {
		return fmt.Errorf("removing copy tree: %w", err)
	}
	if err := removeAll(ctx, t.Copy.Dir); err != nil {
		return fmt.Errorf("removing copy tree: %w", err)
	}
	if err := removeDest(t); err != nil {
		return fmt.Errorf("removing copy tree: %w", err)
	}
	return nil
}
