// Package lockfile is hostfork's one lock helper: an exclusive flock(2)
// on a file (made 0600 when missing, never opened through a symbolic
// link), held until Release or until the process exits — so a crash
// never leaves a lock behind. Processes that share a store coordinate
// through it: stops, reapers and gc of one environment, admission, the
// registry's creation and migration, one server per socket. (The
// registry's writers queue on a byte-range lock of their own, decision 53:
// that is a queue, not a mutual exclusion of a step.)
//
// Any internal package may import it; it imports only the standard
// library and golang.org/x/sys/unix.
package lockfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBusy reports a lock another process holds, when the caller could no
// longer wait (its context ended).
var ErrBusy = errors.New("held by another process")

// Lock is a held lock.
type Lock struct{ f *os.File }

// Open opens (creating, mode 0600) the lock file at path without following
// a symbolic link; the caller may check it (File) before taking it with
// Take.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Acquire takes the lock on path, waiting until it is free or ctx ends
// (then the error matches ErrBusy and ctx's error).
func Acquire(ctx context.Context, path string) (*Lock, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return Take(ctx, f)
}

// Take takes the lock on the open file f (a lock file from Open, or a
// directory), waiting until it is free or ctx ends. The Lock owns f from
// then on; on error f is closed.
func Take(ctx context.Context, f *os.File) (*Lock, error) {
	step := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return &Lock{f: f}, nil
		case err == unix.EINTR:
			continue
		case err != unix.EWOULDBLOCK:
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w (%w)", f.Name(), ErrBusy, ctx.Err())
		}
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if step < 20*time.Millisecond {
			step *= 2
		}
	}
}

// File is the locked file.
func (l *Lock) File() *os.File { return l.f }

// Release releases the lock (closing its file). It may be called more
// than once.
func (l *Lock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
