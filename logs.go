package hostfork

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/watch"
)

// LogOptions select what Command.Logs reads.
type LogOptions struct {
	// Stream is "stdout" (default) or "stderr".
	Stream string
	// Offset is the byte offset to start at. Output is addressed by byte
	// offset, so a reader that reconnects resumes exactly where it
	// stopped.
	Offset int64
	// Follow keeps reading as the command writes, until its tree has
	// exited and everything written is read (then EOF).
	Follow bool
}

// Logs returns a reader of the command's stdout or stderr artifact from a
// byte offset, optionally following it until the tree exits. It works for
// a command started by another process. A command with inherited output
// has no artifact (ErrNotFound).
func (c *Command) Logs(ctx context.Context, opts LogOptions) (io.ReadCloser, error) {
	rec := c.Record()
	if rec.ID == "" {
		if id := c.ID(); id != "" {
			r, err := c.h.e.Command(ctx, id)
			if err != nil {
				return nil, err
			}
			rec = *r
		} else {
			return nil, fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
		}
	}
	path := rec.StdoutPath
	switch opts.Stream {
	case "", "stdout":
	case "stderr":
		path = rec.StderrPath
	default:
		return nil, fmt.Errorf("stream %q: use stdout or stderr: %w", opts.Stream, api.ErrInvalid)
	}
	if path == "" {
		return nil, fmt.Errorf("command %s has no output files (output %s): %w", rec.ID, rec.Output, api.ErrNotFound)
	}
	if opts.Offset < 0 {
		return nil, fmt.Errorf("offset %d is negative: %w", opts.Offset, api.ErrInvalid)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("command %s: %s is gone (retention?): %w", rec.ID, path, api.ErrNotFound)
		}
		return nil, err
	}
	if _, err := f.Seek(opts.Offset, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	l := &logReader{ctx: ctx, c: c, id: rec.ID, f: f, follow: opts.Follow}
	if opts.Follow {
		l.w = watch.New(path)
	}
	return l, nil
}

// logReader reads an artifact, following it until the command's tree is
// gone.
type logReader struct {
	ctx    context.Context
	c      *Command
	id     string
	f      *os.File
	follow bool
	w      *watch.Watcher // nil unless following
	last   bool           // the tree is gone: read to EOF once more, then end
}

func (l *logReader) Read(p []byte) (int, error) {
	for {
		n, err := l.f.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if !l.follow || l.last {
			return 0, io.EOF
		}
		if l.treeGone() {
			// Whatever the tree wrote before it ended is in the file now.
			l.last = true
			continue
		}
		if err := l.wait(); err != nil {
			return 0, err
		}
	}
}

func (l *logReader) treeGone() bool {
	l.c.mu.Lock()
	r := l.c.r
	l.c.mu.Unlock()
	if r != nil {
		select {
		case <-r.TreeDone():
			return true
		default:
			return false
		}
	}
	rec, err := l.c.h.e.Command(l.ctx, l.id)
	return err == nil && (rec.Final() || rec.State == api.CommandUnverified)
}

// wait blocks until the file is written, 250 ms pass, ctx ends or the
// Host is closed.
func (l *logReader) wait() error {
	err := l.w.Wait(l.ctx, l.c.h.e.Closed(), 250*time.Millisecond)
	if errors.Is(err, watch.ErrDone) {
		return api.ErrClosed
	}
	return err
}

func (l *logReader) Close() error {
	if l.w != nil {
		l.w.Close()
		l.w = nil
	}
	return l.f.Close()
}
