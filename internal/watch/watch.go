// Package watch is hostfork's one file-change watcher: an inotify
// instance on a few files (a receipt, a log, the registry's WAL and its
// directory) that a waiter blocks on together with any other descriptors
// that become readable on an event (a guardian's pidfd), with a bounded
// wait so that a change inotify can't report (a file replaced, inotify
// unavailable) is still seen at the next poll. Callers re-read their
// source after every wake-up: a wake-up says "look again", never what
// changed. Dir (tree.go) is the one exception: it reports what changed
// below a directory, for a consumer that streams changes (Env.Watch).
//
// Any internal package and the root package may import it.
package watch

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDone is what Wait returns when its done channel is closed.
var ErrDone = errors.New("watch: done")

// events are the changes a watch wakes on: a file written (or closed after
// writing), and in a directory an entry created or moved in.
const events = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DONT_FOLLOW

// step is the longest a Wait blocks in the kernel before it looks at ctx
// and done again.
const step = 50 * time.Millisecond

// Watcher watches files for changes. The zero value is not usable; New
// makes one. It is not safe for concurrent use.
type Watcher struct {
	fd      int // the inotify instance, -1 when there is none
	watched map[string]bool
}

// New returns a watcher on paths (those that exist now; Add the others
// later). Without inotify it still works: Wait then returns at every max.
func New(paths ...string) *Watcher {
	w := &Watcher{fd: -1, watched: map[string]bool{}}
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err == nil {
		w.fd = fd
	}
	for _, p := range paths {
		w.Add(p)
	}
	return w
}

// Add watches path too (a file is watched in place, by inode: a file
// renamed over it is seen by watching its directory). It reports whether
// path is watched.
func (w *Watcher) Add(path string) bool {
	if w.fd < 0 {
		return false
	}
	if w.watched[path] {
		return true
	}
	if _, err := unix.InotifyAddWatch(w.fd, path, events); err != nil {
		return false
	}
	w.watched[path] = true
	return true
}

// Wait blocks until a watched file changes, one of fds becomes readable,
// max passes (nil then too: look again), ctx ends (its error) or done is
// closed (ErrDone). Events already queued are consumed, so the next Wait
// blocks until a new one.
func (w *Watcher) Wait(ctx context.Context, done <-chan struct{}, max time.Duration, fds ...int) error {
	pfds := make([]unix.PollFd, 0, len(fds)+1)
	for _, fd := range fds {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	if len(w.watched) > 0 {
		pfds = append(pfds, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN})
	}
	end := time.Now().Add(max)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return ErrDone
		default:
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		left = min(left, step)
		if len(pfds) == 0 {
			time.Sleep(left)
			continue
		}
		n, err := unix.Poll(pfds, int(left/time.Millisecond)+1)
		if err != nil && err != unix.EINTR {
			return os.NewSyscallError("poll", err)
		}
		if n > 0 {
			w.drain()
			return nil
		}
	}
}

// drain reads the queued events.
func (w *Watcher) drain() {
	if w.fd < 0 {
		return
	}
	var buf [4096]byte
	for {
		if n, err := unix.Read(w.fd, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}

// Close releases the watcher. The instance is closed in the background:
// closing one that held a watch waits for the kernel's fsnotify grace
// period, 8–16 ms on the test host (decisions.md, entry 61), which no
// caller needs to wait for.
func (w *Watcher) Close() {
	if fd := w.fd; fd >= 0 {
		w.fd = -1
		go unix.Close(fd)
	}
}

// Changes signals (coalesced) on ch whenever a watched file changes, and
// at least every max, until ctx ends; then it closes the watcher. It is
// for a consumer that selects on a channel (a streaming HTTP handler).
func (w *Watcher) Changes(ctx context.Context, max time.Duration) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		defer w.Close()
		for w.Wait(ctx, nil, max) == nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch
}
