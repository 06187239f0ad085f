package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveUnrecorded removes an allocation whose Prepare ran (or was cut
// short by a crash) but whose Tree record was never written. The caller
// must know that dest was created exclusively by this package for that
// allocation (the ledger's intent names it, and its path is unique); only
// then is deleting it safe without a recorded identity. A snapshot inside
// (dest/tree as a subvolume) is destroyed by id; everything else under
// dest is ordinary files Prepare wrote. Anything mounted below dest makes
// it refuse (ErrBusy).
func RemoveUnrecorded(ctx context.Context, dest string) error {
	if !filepath.IsAbs(dest) || filepath.Clean(dest) != dest {
		return fmt.Errorf("removing %s: %w", dest, ErrInvalidRequest)
	}
	if _, err := os.Lstat(dest); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := refuseMounts(dest); err != nil {
		return err
	}
	tree := filepath.Join(dest, treeDirName)
	if sv, err := InspectSubvolume(tree); err == nil {
		fd, err := openDir(dest)
		if err != nil {
			return err
		}
		err = destroySubvolume(fd, tree, treeDirName, sv.ID)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	return nil
}
