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
	// Tail starts at the last Tail lines instead of Offset (a last line
	// without its newline counts as one); TailOffset says where that is.
	Tail int
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
	if opts.Offset < 0 || opts.Tail < 0 {
		return nil, fmt.Errorf("offset %d, tail %d: neither may be negative: %w", opts.Offset, opts.Tail, api.ErrInvalid)
	}
	if opts.Offset > 0 && opts.Tail > 0 {
		return nil, fmt.Errorf("give an offset or a tail, not both: %w", api.ErrInvalid)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("command %s: %s is gone (retention?): %w", rec.ID, path, api.ErrNotFound)
		}
		return nil, err
	}
	if opts.Tail > 0 {
		if opts.Offset, err = tailOffset(f, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
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

func (l *logReader) treeGone() bool { return l.c.treeGone(l.ctx, l.id) }

// treeGone reports whether the command's tree has ended (or its end can't
// be verified): from the launch in this process, else from the record.
func (c *Command) treeGone(ctx context.Context, id string) bool {
	c.mu.Lock()
	r := c.r
	c.mu.Unlock()
	if r != nil {
		select {
		case <-r.TreeDone():
			return true
		default:
			return false
		}
	}
	rec, err := c.h.e.Command(ctx, id)
	return err == nil && (rec.Final() || rec.State == api.CommandUnverified)
}

// TailOffset is the byte offset at which the last lines of the command's
// stdout or stderr begin (a last line without its newline counts as
// one): where LogOptions.Tail starts reading.
func (c *Command) TailOffset(ctx context.Context, stream string, lines int) (int64, error) {
	rd, err := c.Logs(ctx, LogOptions{Stream: stream, Tail: lines})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	return rd.(*logReader).f.Seek(0, io.SeekCurrent)
}

// tailOffset finds where the last n lines of f begin, reading backwards
// from its end in blocks.
func tailOffset(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	buf := make([]byte, 32<<10)
	pos := end
	first := true
	for pos > 0 {
		k := min(int64(len(buf)), pos)
		pos -= k
		b := buf[:k]
		if _, err := f.ReadAt(b, pos); err != nil && err != io.EOF {
			return 0, err
		}
		if first {
			// The file's last newline ends the last line, it doesn't
			// start one.
			if b[len(b)-1] == '\n' {
				b = b[:len(b)-1]
			}
			first = false
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				n--
				if n == 0 {
					return pos + int64(i) + 1, nil
				}
			}
		}
	}
	return 0, nil
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
