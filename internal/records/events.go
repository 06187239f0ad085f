package records

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

// Stream yields the events after sequence since, in order; with follow it
// keeps yielding new ones as they are committed, until ctx ends (the
// iteration then ends with ctx's error) or closed is closed
// (ErrClosed). A consumer that resumes with the last sequence it saw
// misses nothing and sees nothing twice: events are written in the same
// transaction as the change they report. New commits are noticed through
// inotify on the registry's WAL, with a periodic poll as the backstop.
func (r *Records) Stream(ctx context.Context, since int64, follow bool, closed <-chan struct{}) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		var w *watch.Watcher
		if follow {
			// Every commit appends to the WAL; the store directory is
			// watched too, since the WAL may be created or replaced.
			w = watch.New(filepath.Join(r.root, registry.FileName+"-wal"), r.root)
			defer w.Close()
		}
		for {
			evs, err := r.DB.Events(ctx, since, 1000)
			if err != nil {
				select {
				case <-closed:
					err = api.ErrClosed
				default:
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
			// Every commit writes the WAL, in the watched store directory:
			// the look without an event is only a backstop.
			backstop := 2 * time.Second
			if !w.Watching() {
				backstop = 250 * time.Millisecond
			}
			if err := w.Wait(ctx, closed, backstop); err != nil {
				if errors.Is(err, watch.ErrDone) {
					err = api.ErrClosed
				}
				yield(api.Event{}, err)
				return
			}
		}
	}
}
