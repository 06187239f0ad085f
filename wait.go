package hostfork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/watch"
)

// WaitOptions say what Command.WaitUntil waits for. With neither For nor
// Stalled it is Wait (the leader) or, with Tree, WaitTree.
type WaitOptions struct {
	// Tree waits for the whole tree instead of the leader (plain waits).
	Tree bool
	// For returns as soon as a line of the output matches (stdout and
	// stderr, or only Stream). A line is matched as it is written, also
	// before its newline (a prompt), up to MaxMatchLine bytes.
	For *regexp.Regexp
	// Stream limits For to stdout or stderr ("": both).
	Stream string
	// Since is the byte offset of Stream to search from (it needs Stream:
	// each stream has its own offsets); Match.Next of a previous match
	// continues after it.
	Since int64
	// Stalled returns once the command has written no output for this long
	// (the newest modification of its output files, so quiet before the
	// call counts).
	Stalled time.Duration
}

// MaxMatchLine is the longest line For matches as one: a longer line is
// matched in pieces of this size.
const MaxMatchLine = 64 << 10

// WaitFor waits until the command's output (stdout or stderr) matches re
// and returns where: the stream, the byte offset and the line. When the
// tree ends without a match it returns an error matching ErrCommandFinished. It
// works on a command another process started (Host.OpenCommand).
func (c *Command) WaitFor(ctx context.Context, re *regexp.Regexp) (Match, error) {
	out, err := c.WaitUntil(ctx, WaitOptions{For: re})
	if err != nil {
		return Match{}, err
	}
	if out.Match == nil {
		return Match{}, fmt.Errorf("command %s ended (%s) without output matching %q: %w", out.Command.ID, out.Command.State, re, api.ErrCommandFinished)
	}
	return *out.Match, nil
}

// WaitStalled waits until the command has written no output for d and
// returns when it last did. When the tree ends first it returns an error
// matching ErrCommandFinished.
func (c *Command) WaitStalled(ctx context.Context, d time.Duration) (time.Time, error) {
	out, err := c.WaitUntil(ctx, WaitOptions{Stalled: d})
	if err != nil {
		return time.Time{}, err
	}
	if out.QuietSince == nil {
		return time.Time{}, fmt.Errorf("command %s ended (%s) before its output stalled: %w", out.Command.ID, out.Command.State, api.ErrCommandFinished)
	}
	return *out.QuietSince, nil
}

// validate checks the options (ErrInvalid, naming the fix).
func (o *WaitOptions) validate() error {
	switch o.Stream {
	case "", "stdout", "stderr":
	default:
		return fmt.Errorf("stream %q: use stdout or stderr: %w", o.Stream, api.ErrInvalid)
	}
	switch {
	case o.Since < 0:
		return fmt.Errorf("since %d is negative: give a byte offset: %w", o.Since, api.ErrInvalid)
	case o.Since > 0 && o.Stream == "":
		return fmt.Errorf("since needs a stream (stdout or stderr): each stream has its own offsets: %w", api.ErrInvalid)
	case o.Since > 0 && o.For == nil:
		return fmt.Errorf("since is where a pattern search starts: it needs for: %w", api.ErrInvalid)
	case o.Stalled < 0:
		return fmt.Errorf("stalled %s is negative: %w", o.Stalled, api.ErrInvalid)
	case o.Stream != "" && o.For == nil:
		return fmt.Errorf("stream limits a pattern search: it needs for: %w", api.ErrInvalid)
	case o.Tree && (o.For != nil || o.Stalled > 0):
		return fmt.Errorf("tree is for a plain wait: a wait for output already ends when the tree does: %w", api.ErrInvalid)
	}
	return nil
}

// WaitUntil waits for what o says: the leader's exit (the zero options),
// the tree's end (Tree), a pattern in the output (For), a stall (Stalled),
// whichever of For and Stalled comes first, or the tree's end before them
// (reason "ended"). It reads the output files as Logs does, so it works
// on a command another process started; ctx bounds the wait (a timeout is
// the caller's context).
func (c *Command) WaitUntil(ctx context.Context, o WaitOptions) (WaitOutcome, error) {
	if err := o.validate(); err != nil {
		return WaitOutcome{}, err
	}
	if o.For == nil && o.Stalled == 0 {
		if o.Tree {
			rec, err := c.WaitTree(ctx)
			return WaitOutcome{Reason: api.OutcomeTree, Command: rec}, err
		}
		rec, err := c.Wait(ctx)
		return WaitOutcome{Reason: api.OutcomeLeader, Command: rec}, err
	}
	rec, err := c.current(ctx)
	if err != nil {
		return WaitOutcome{}, err
	}
	if rec.StdoutPath == "" {
		return WaitOutcome{}, fmt.Errorf("command %s has no output files (output %s): a wait for output reads them; start it with output files or pipe: %w", rec.ID, rec.Output, api.ErrInvalid)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		out *WaitOutcome // nil: this watcher saw the tree end
		err error
	}
	results := make(chan result, 3)
	n := 0
	if o.For != nil {
		for _, s := range []string{"stdout", "stderr"} {
			if o.Stream != "" && o.Stream != s {
				continue
			}
			n++
			go func() {
				m, err := c.scan(wctx, s, o.Since, o.For)
				if m == nil || err != nil {
					results <- result{err: err}
					return
				}
				results <- result{out: &WaitOutcome{Reason: api.OutcomeMatch, Match: m}}
			}()
		}
	}
	if o.Stalled > 0 {
		n++
		go func() {
			at, err := c.stall(wctx, &rec, o.Stalled)
			if at.IsZero() || err != nil {
				results <- result{err: err}
				return
			}
			results <- result{out: &WaitOutcome{Reason: api.OutcomeStalled, QuietSince: &at}}
		}()
	}
	out := WaitOutcome{Reason: api.OutcomeEnded}
	for ; n > 0; n-- {
		r := <-results
		if r.err != nil {
			return WaitOutcome{}, r.err
		}
		if r.out != nil {
			out = *r.out
			break
		}
	}
	cancel()
	fresh, err := c.h.e.Command(ctx, rec.ID)
	if err != nil {
		return WaitOutcome{}, err
	}
	out.Command = *fresh
	return out, nil
}

// current is the command's record, read now (for its paths and state).
func (c *Command) current(ctx context.Context) (CommandRecord, error) {
	id := c.ID()
	if id == "" {
		if rec := c.Record(); rec.ID != "" {
			id = rec.ID
		} else {
			return CommandRecord{}, fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
		}
	}
	rec, err := c.h.e.Command(ctx, id)
	if err != nil {
		return CommandRecord{}, err
	}
	return *rec, nil
}

// scan follows one stream from offset since until a line matches re
// (the match), the tree ends with everything read (nil) or ctx ends.
func (c *Command) scan(ctx context.Context, stream string, since int64, re *regexp.Regexp) (*Match, error) {
	rd, err := c.Logs(ctx, LogOptions{Stream: stream, Offset: since, Follow: true})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var line []byte
	lineOff, off := since, since
	match := func(ended bool) *Match {
		loc := re.FindIndex(line)
		if loc == nil {
			return nil
		}
		m := &Match{Stream: stream, Offset: lineOff + int64(loc[0]), Text: string(line[loc[0]:loc[1]]),
			Line: string(line), LineOffset: lineOff, Next: lineOff + int64(len(line))}
		if ended {
			m.Next++ // past the newline
		}
		return m
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := rd.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				line = append(line, chunk...)
				off += int64(len(chunk))
				break
			}
			line = append(line, chunk[:i]...)
			if m := match(true); m != nil {
				return m, nil
			}
			off += int64(i + 1)
			lineOff, line, chunk = off, line[:0], chunk[i+1:]
		}
		for len(line) >= MaxMatchLine {
			// Too long to keep whole: match what there is, then go on.
			piece := line[:MaxMatchLine]
			rest := line[MaxMatchLine:]
			line = piece
			if m := match(false); m != nil {
				return m, nil
			}
			lineOff += MaxMatchLine
			line = append(line[:0], rest...)
		}
		if n > 0 && len(line) > 0 {
			// A line not ended yet (a prompt) is matched as it grows.
			if m := match(false); m != nil {
				return m, nil
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil, nil
		}
		if rerr != nil {
			return nil, rerr
		}
	}
}

// stall waits until the command's output files have not been written for
// d (their newest modification time, so quiet before the call counts) and
// returns that time; zero when the tree ended first.
func (c *Command) stall(ctx context.Context, rec *CommandRecord, d time.Duration) (time.Time, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var paths []string
	for _, p := range []string{rec.StdoutPath, rec.StderrPath} {
		if p == "" {
			continue
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return time.Time{}, fmt.Errorf("command %s: %s is gone (retention?): %w", rec.ID, p, api.ErrNotFound)
			}
			return time.Time{}, err
		}
		files = append(files, f)
		paths = append(paths, p)
	}
	w := watch.New(paths...)
	defer w.Close()
	var checked time.Time // when the tree's end was last looked for
	for {
		var last time.Time
		for _, f := range files {
			st, err := f.Stat()
			if err != nil {
				return time.Time{}, err
			}
			if st.ModTime().After(last) {
				last = st.ModTime()
			}
		}
		quiet := time.Since(last)
		if quiet >= d {
			return last.UTC(), nil
		}
		// A command that writes all the time wakes this loop at each
		// write: its record is read at most every 250 ms.
		if time.Since(checked) >= 250*time.Millisecond {
			if c.treeGone(ctx, rec.ID) {
				return time.Time{}, nil
			}
			checked = time.Now()
		}
		err := w.Wait(ctx, c.h.e.Closed(), min(d-quiet, 250*time.Millisecond))
		if errors.Is(err, watch.ErrDone) {
			return time.Time{}, api.ErrClosed
		}
		if err != nil {
			return time.Time{}, err
		}
	}
}
