package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// CopyOptions configure CopyDir.
type CopyOptions struct {
	// Reflink selects how file data is cloned (ReflinkAuto by default).
	Reflink ReflinkMode
	// Tolerate records per-file errors and continues (a partial copy)
	// instead of stopping at the first.
	Tolerate bool
	// Progress, if set, is called after each regular file.
	Progress func(files, bytes int64)
}

// CopyResult describes a finished CopyDir.
type CopyResult struct {
	Files  int64    `json:"files"`
	Bytes  int64    `json:"bytes"`
	Cloned int64    `json:"cloned"`
	Failed int64    `json:"failed"`
	Errors []string `json:"errors,omitempty"`
	// PartialPath, set only when CopyDir failed after it began copying,
	// is where it left the incomplete copy: a directory named
	// .<base>.partial-<random> beside the destination (unless someone
	// who can write there moved it since). Nothing incomplete is ever at
	// the destination's own name.
	PartialPath string `json:"partial_path,omitempty"`
}

// CopyDir copies the tree at src to dst, for exports: modes, ownership (as
// root), times, symlinks, hard links and special files are kept; data is
// reflinked where the filesystem allows. dst must not exist; its parent
// must, and is opened without following a symbolic link in any component.
//
// The destination's parent may be writable by other users (an export to
// /tmp, or into someone else's directory), so the copy is built by
// descriptors (see copier) in a new sibling directory
// .<base>.partial-<random>, mode 0700 while it is written, given src's
// mode, owner and times on its descriptor at the end, and then renamed
// to dst with RENAME_NOREPLACE and checked to be the directory CopyDir
// made. src itself is opened following symbolic links on the way to it
// (the caller names it: a recorded tree, or a view under /proc/PID/root),
// everything below it without.
//
// If the copy fails (not merely per-file errors a Tolerate copy records in
// Failed and Errors), the partial directory is left under its partial
// name and the result names it in PartialPath.
func CopyDir(ctx context.Context, src, dst string, opts CopyOptions) (CopyResult, error) {
	switch opts.Reflink {
	case ReflinkAuto, ReflinkAlways, ReflinkNever:
	default:
		return CopyResult{}, fmt.Errorf("copying %s: reflink mode %q: %w", src, opts.Reflink, ErrInvalidRequest)
	}
	if !filepath.IsAbs(src) || !filepath.IsAbs(dst) || filepath.Clean(dst) == "/" {
		return CopyResult{}, fmt.Errorf("copying %s to %s: paths must be absolute: %w", src, dst, ErrInvalidRequest)
	}
	dst = filepath.Clean(dst)
	if err := ctx.Err(); err != nil {
		return CopyResult{}, fmt.Errorf("copying %s: %w", src, err)
	}
	parent, err := safefs.OpenDir(filepath.Dir(dst))
	if err != nil {
		return CopyResult{}, fmt.Errorf("copying to %s: opening its parent: %w", dst, err)
	}
	defer parent.Close()
	name := filepath.Base(dst)
	if _, err := parent.Lstat(name); err == nil {
		return CopyResult{}, fmt.Errorf("copying to %s: %w", dst, ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return CopyResult{}, fmt.Errorf("copying to %s: %w", dst, err)
	}
	source, err := safefs.OpenDirFollowing(src)
	if err != nil {
		return CopyResult{}, fmt.Errorf("copying %s: %w", src, err)
	}
	defer source.Close()
	if err := checkNoOverlap(KindCopy, source, parent, dst); err != nil {
		return CopyResult{}, fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	partial := "." + name + ".partial-" + hex.EncodeToString(rnd[:])
	top, err := parent.MkdirExclusive(partial, 0o700)
	if err != nil {
		return CopyResult{}, fmt.Errorf("copying to %s: %w", dst, err)
	}
	defer top.Close()
	res := CopyResult{PartialPath: top.Path()}
	c := newCopier(ctx, opts.Reflink, top)
	c.tolerate, c.progress = opts.Tolerate, opts.Progress
	err = c.copyInto(source, top)
	res.Files, res.Bytes, res.Cloned, res.Failed, res.Errors = c.files, c.bytes, c.cloned, c.failed, c.errs
	if err != nil {
		return res, fmt.Errorf("copying %s to %s (the incomplete copy is left at %s): %w", src, dst, top.Path(), err)
	}
	if err := parent.Rename(partial, parent, name); err != nil {
		if errors.Is(err, safefs.ErrExists) {
			err = fmt.Errorf("%s appeared while copying: %w", dst, ErrExists)
		}
		return res, fmt.Errorf("copying %s to %s (the copy is left at %s): %w", src, dst, top.Path(), err)
	}
	// Someone who can write the parent may have moved the partial
	// directory and put something else under its name: then that went to
	// dst, and the copy is wherever they moved it.
	st, err := parent.Lstat(name)
	if err != nil {
		return res, fmt.Errorf("copying %s to %s: checking the result: %w", src, dst, err)
	}
	if id := top.ID(); st.Dev != id.Dev || st.Ino != id.Ino {
		return res, fmt.Errorf("copying %s to %s: another user replaced the copy's directory %s before it was renamed, so %s is not hostfork's copy (which they moved elsewhere in %s): %w",
			src, dst, top.Path(), dst, parent.Path(), ErrIdentityMismatch)
	}
	res.PartialPath = ""
	return res, nil
}
