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
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDone is what Wait returns when its done channel is closed.
var ErrDone = errors.New("watch: done")

// events are the changes a watch wakes on: a file written (or closed after
// writing), and in a directory an entry created or moved in.
const events = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DONT_FOLLOW

// Watcher watches files for changes. The zero value is not usable; New
// makes one. It is not safe for concurrent use.
type Watcher struct {
	fd      int // the inotify instance, -1 when there is none
	wake    int // an eventfd a Wait's ctx or done writes to, -1 until needed
	watched map[string]bool
}

// New returns a watcher on paths (those that exist now; Add the others
// later). Without inotify it still works: Wait then returns at every max.
func New(paths ...string) *Watcher {
	w := &Watcher{fd: -1, wake: -1, watched: map[string]bool{}}
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

// Watching reports whether inotify watches any path: when it does not,
// a change is seen only when Wait's max passes.
func (w *Watcher) Watching() bool { return len(w.watched) > 0 }

// Wait blocks until a watched file changes, one of fds becomes readable,
// max passes (nil then too: look again), ctx ends (its error) or done is
// closed (ErrDone). Events already queued are consumed, so the next Wait
// blocks until a new one. It sleeps in the kernel the whole time: the end
// of ctx or done wakes it through an eventfd, not a periodic look.
func (w *Watcher) Wait(ctx context.Context, done <-chan struct{}, max time.Duration, fds ...int) error {
	if w.wake < 0 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return os.NewSyscallError("eventfd", err)
		}
		w.wake = fd
	}
	// A wake-up after Wait returned is dropped: the eventfd then belongs
	// to the next Wait, or is closed.
	var mu sync.Mutex
	live := true
	wake := func() {
		mu.Lock()
		if live {
			unix.Write(w.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
		mu.Unlock()
	}
	stop := context.AfterFunc(ctx, wake)
	defer func() {
		stop()
		mu.Lock()
		live = false
		mu.Unlock()
	}()
	if done != nil {
		quit := make(chan struct{})
		defer close(quit)
		go func() {
			select {
			case <-done:
				wake()
			case <-quit:
			}
		}()
	}
	pfds := make([]unix.PollFd, 0, len(fds)+2)
	pfds = append(pfds, unix.PollFd{Fd: int32(w.wake), Events: unix.POLLIN})
	for _, fd := range fds {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	if len(w.watched) > 0 {
		pfds = append(pfds, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN})
	}
	end := time.Now().Add(max)
	for {
		var b [8]byte
		unix.Read(w.wake, b[:]) // a wake-up of an earlier Wait, or this one's
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
		n, err := unix.Poll(pfds, int(left/time.Millisecond)+1)
		if err != nil && err != unix.EINTR {
			return os.NewSyscallError("poll", err)
		}
		if n > 0 && pfds[0].Revents == 0 {
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
	if w.wake >= 0 {
		unix.Close(w.wake)
		w.wake = -1
	}
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
