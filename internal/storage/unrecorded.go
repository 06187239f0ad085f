package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// RemoveUnrecorded removes an allocation whose Prepare ran (or was cut
// short by a crash) but whose Tree record was never written. The caller
// must know that dest was created exclusively by this package for that
// allocation (the ledger's intent names it, and its path is unique); only
// then is deleting it safe without a recorded identity. So that a name
// someone else could have made is never taken for it, dest's parent must
// be a private allocation area (see PoolDir) reached without symbolic
// links, and dest a real directory owned by this user. A snapshot inside
// (dest/tree as a subvolume) is destroyed by id relative to dest's
// descriptor; everything else under dest is removed by descriptors
// (safefs.RemoveTree). Anything mounted below dest makes it refuse
// (ErrBusy).
func RemoveUnrecorded(ctx context.Context, dest string) error {
	if !filepath.IsAbs(dest) || filepath.Clean(dest) != dest || dest == "/" {
		return fmt.Errorf("removing %s: %w", dest, ErrInvalidRequest)
	}
	parent, err := safefs.OpenDir(filepath.Dir(dest))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	defer parent.Close()
	if err := parent.CheckPrivate(); err != nil {
		return fmt.Errorf("removing %s: an unrecorded allocation is only removed from a private allocation area: %w", dest, err)
	}
	d, err := parent.OpenDir(filepath.Base(dest))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("removing %s: it is owned by uid %d, so this package did not make it: %w", dest, st.Uid, ErrIdentityMismatch)
	}
	if err := refuseMounts(dest); err != nil {
		return err
	}
	if sv, err := inspectAt(d, treeDirName); err == nil {
		if err := destroySubvolume(d.Fd(), filepath.Join(dest, treeDirName), treeDirName, sv.ID); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := removeDest(parent, Tree{Dest: dest, DestID: d.ID()}); err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	return nil
}
