package records

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/internal/lockfile"
)

// EnvLock serializes reapers, stops and gc on one environment. It waits at
// most limit (an error matching lockfile.ErrBusy then). An environment
// whose run directory does not exist (a creation killed before its mkdir)
// is locked through the directory that holds the run directories. A lock
// that can't be taken at all is an error, never a lock taken.
func EnvLock(runDir string, limit time.Duration) (func(), error) {
	f, err := lockfile.Open(filepath.Join(runDir, "reap.lock"))
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.Open(filepath.Dir(runDir))
	}
	if err != nil {
		return nil, fmt.Errorf("locking the environment: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	l, err := lockfile.Take(ctx, f)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// LockReason is what a report says of a lock not taken: busy, or why
// it could not be taken at all.
func LockReason(err error, busy string) string {
	if errors.Is(err, lockfile.ErrBusy) {
		return busy
	}
	return err.Error()
}

// StopLock serializes overlapping stops of one tree across processes.
func StopLock(ctx context.Context, dir string) (func(), error) {
	l, err := lockfile.Acquire(ctx, filepath.Join(dir, "stop.lock"))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
