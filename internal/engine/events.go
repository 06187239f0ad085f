package engine

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// EventsSince reads up to limit events after sequence since (limit <= 0:
// all).
func (e *Engine) EventsSince(ctx context.Context, since int64, limit int) ([]api.Event, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.reg.Events(ctx, since, limit)
}

// LastEvent is the highest event sequence so far.
func (e *Engine) LastEvent(ctx context.Context) (int64, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	return e.reg.LastEvent(ctx)
}

// Events yields the events after sequence since, in order; with follow it
// keeps yielding new ones as they are committed, until ctx ends (the
// iteration then ends with ctx's error) or the engine is closed
// (ErrClosed). A consumer that resumes with the last sequence it saw
// misses nothing and sees nothing twice: events are written in the same
// transaction as the change they report. New commits are noticed through
// inotify on the registry's WAL, with a periodic poll as the backstop.
func (e *Engine) Events(ctx context.Context, since int64, follow bool) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		if err := e.checkOpen(); err != nil {
			yield(api.Event{}, err)
			return
		}
		var w *walWatch
		if follow {
			w = newWALWatch(e.root)
			defer w.close()
		}
		for {
			evs, err := e.reg.Events(ctx, since, 1000)
			if err != nil {
				if e.isClosed() {
					err = api.ErrClosed
				}
				yield(api.Event{}, err)
				return
			}
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
				since = ev.Seq
			}
			if len(evs) == 1000 {
				continue
			}
			if !follow {
				return
			}
			if err := w.wait(ctx, e.closed); err != nil {
				yield(api.Event{}, err)
				return
			}
		}
	}
}

// walWatch wakes a follower when the registry's WAL changes (every commit
// appends to it).
type walWatch struct{ fd int }

func newWALWatch(root string) *walWatch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return &walWatch{fd: -1}
	}
	// Watch the store directory too: the WAL may be created or replaced.
	_, _ = unix.InotifyAddWatch(fd, filepath.Join(root, registry.FileName+"-wal"), unix.IN_MODIFY)
	_, _ = unix.InotifyAddWatch(fd, root, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_MODIFY)
	return &walWatch{fd: fd}
}

func (w *walWatch) close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
	}
}

// wait returns at the next change (or after a poll interval), ctx's error
// when it ends, ErrClosed when closed is.
func (w *walWatch) wait(ctx context.Context, closed <-chan struct{}) error {
	const poll = 250 * time.Millisecond
	end := time.Now().Add(poll)
	buf := make([]byte, 4096)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return api.ErrClosed
		default:
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		if w.fd < 0 {
			step := 50 * time.Millisecond
			if left < step {
				step = left
			}
			time.Sleep(step)
			continue
		}
		step := 50 * time.Millisecond
		if left < step {
			step = left
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(step/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return os.NewSyscallError("poll", err)
		}
		if n > 0 {
			for {
				if _, err := unix.Read(w.fd, buf); err != nil {
					break
				}
			}
			return nil
		}
	}
}
