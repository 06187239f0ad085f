package engine

import (
	"context"
	"errors"
	"iter"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/watch"
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

// EventCounts is how many events of each kind and reason the store has
// ever recorded (registry.DB.EventCounts).
func (e *Engine) EventCounts(ctx context.Context) ([]api.EventCount, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	return e.reg.EventCounts(ctx)
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
		var w *watch.Watcher
		if follow {
			w = newWALWatch(e.root)
			defer w.Close()
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
			if err := w.Wait(ctx, e.closed, 250*time.Millisecond); err != nil {
				if errors.Is(err, watch.ErrDone) {
					err = api.ErrClosed
				}
				yield(api.Event{}, err)
				return
			}
		}
	}
}

// walWatch wakes a follower when the registry's WAL changes (every commit
// appends to it); the store directory is watched too, since the WAL may be
// created or replaced.
func newWALWatch(root string) *watch.Watcher {
	return watch.New(filepath.Join(root, registry.FileName+"-wal"), root)
}
