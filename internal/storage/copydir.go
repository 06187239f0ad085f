package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
}

// CopyDir copies the tree at src into dst, which it creates exclusively
// (it must not exist; its parent must). It is the copy backend's copier,
// for exports: modes, ownership (as root), times, symlinks, hard links and
// special files are kept; data is reflinked where the filesystem allows.
func CopyDir(ctx context.Context, src, dst string, opts CopyOptions) (CopyResult, error) {
	if opts.Reflink == "" {
		opts.Reflink = ReflinkAuto
	}
	if !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
		return CopyResult{}, fmt.Errorf("copying %s to %s: paths must be absolute: %w", src, dst, ErrInvalidRequest)
	}
	if _, err := os.Lstat(dst); err == nil {
		return CopyResult{}, fmt.Errorf("copying to %s: %w", dst, ErrExists)
	}
	c := copier{ctx: ctx, mode: opts.Reflink, root: os.Geteuid() == 0, links: map[[2]uint64]string{},
		tolerate: opts.Tolerate, progress: opts.Progress}
	err := c.copyTree(src, dst)
	return CopyResult{Files: c.files, Bytes: c.bytes, Cloned: c.cloned, Failed: c.failed, Errors: c.errs}, err
}
