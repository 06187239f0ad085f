package hostfork

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/session"
)

// TermSize is a terminal's size in character cells.
type TermSize struct{ Cols, Rows uint16 }

// StdinPipe, as Command.Stdin, gives a command (without TTY) a stdin pipe
// whose write end its guardian holds until CloseStdin or the command's
// end: Send writes to it, from any process (docs/sessions.md).
var StdinPipe io.Reader = stdinPipe{}

type stdinPipe struct{}

func (stdinPipe) Read([]byte) (int, error) { return 0, io.EOF }

// DefaultReplay is how much output Attach replays: enough to redraw a
// screen.
const DefaultReplay = 64 << 10

// AttachOptions are Command.AttachWith's options.
type AttachOptions struct {
	// Replay is how many bytes of the latest output are sent first (0:
	// none; the output from the attach on).
	Replay int64
	// NoStdin attaches to watch: Write is refused.
	NoStdin bool
}

// Session is a client attached to a command's session (Command.Attach).
// Read returns the command's output (its terminal's, for a TTY command):
// the replay, then live output, until the leader has exited and all its
// output was read (io.EOF). Write types into the terminal (or writes to
// the stdin pipe), in order with other clients' input. A client that fell
// far behind is moved ahead: Read then returns a one-line marker, and the
// bytes it skipped are in the command's log. After io.EOF, Exit returns
// the command's record with the leader's status. A Session is for one
// reader and any number of writers.
type Session struct {
	c     *Command
	conn  *session.Conn
	tty   bool
	wmu   sync.Mutex
	rbuf  []byte
	off   int64 // log offset of the next output byte Read returns
	end   int64 // the log's end at attach: where the replay ends
	ended bool  // the guardian sent the exit frame
	rerr  error
}

// Attach attaches to the command's session, replaying DefaultReplay bytes
// of output first. It works on a handle from Host.OpenCommand in another
// process. A command without a session returns ErrNoSession; one whose
// leader has exited, ErrCommandFinished.
func (c *Command) Attach(ctx context.Context) (*Session, error) {
	return c.AttachWith(ctx, AttachOptions{Replay: DefaultReplay})
}

// AttachWith is Attach with options.
func (c *Command) AttachWith(ctx context.Context, o AttachOptions) (*Session, error) {
	if o.Replay < 0 {
		return nil, fmt.Errorf("replay %d is negative: %w", o.Replay, api.ErrInvalid)
	}
	var flags byte
	if o.NoStdin {
		flags |= session.NoInput
	}
	conn, w, err := c.dialSession(ctx, o.Replay, flags)
	if err != nil {
		return nil, err
	}
	return &Session{c: c, conn: conn, tty: w.Kind == session.KindTTY, off: w.Offset, end: w.End}, nil
}

// dialSession connects to the command's session and exchanges hellos.
func (c *Command) dialSession(ctx context.Context, replay int64, flags byte) (*session.Conn, session.Welcomed, error) {
	var w session.Welcomed
	id := c.ID()
	if c.h == nil || id == "" {
		return nil, w, fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
	}
	rec, err := c.h.e.Command(ctx, id)
	if err != nil {
		return nil, w, err
	}
	if rec.Session == "" {
		return nil, w, fmt.Errorf("command %s: %w", id, api.ErrNoSession)
	}
	if rec.LeaderState == api.PhaseExited || rec.Final() {
		return nil, w, fmt.Errorf("command %s: its leader has exited; read its output with logs: %w", id, api.ErrCommandFinished)
	}
	conn, err := session.Dial(ctx, rec.Dir)
	if errors.Is(err, session.ErrNoSocket) {
		return nil, w, fmt.Errorf("command %s: its session has ended; read its output with logs: %w", id, api.ErrCommandFinished)
	}
	if err != nil {
		return nil, w, fmt.Errorf("command %s: attaching: %w", id, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err = conn.Send(session.Hello, session.HelloPayload(replay, flags)); err == nil {
		var f session.Frame
		if f, err = conn.Next(); err == nil {
			switch f.Type {
			case session.Welcome:
				w, err = session.ParseWelcome(f.Payload)
			case session.Error:
				err = guardianErr(id, f.Payload)
			default:
				err = fmt.Errorf("session: unexpected frame %q before the welcome", f.Type)
			}
		}
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, w, ctx.Err()
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, w, fmt.Errorf("command %s: its session has ended: %w", id, api.ErrCommandFinished)
		}
		return nil, w, err
	}
	return conn, w, nil
}

// guardianErr is an Error frame from the guardian: the request was bad.
func guardianErr(id string, msg []byte) error {
	return fmt.Errorf("command %s: session: %s: %w", id, msg, api.ErrInvalid)
}

// oneShot connects without output, sends frames, and waits for the
// guardian to confirm it handled them.
func (c *Command) oneShot(ctx context.Context, frames ...session.Frame) error {
	conn, _, err := c.dialSession(ctx, 0, session.NoOutput)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// A guardian that refuses a frame answers with an error frame and
	// closes: a later send then fails, but the answer is there to read.
	sendErr := func(err error) error {
		if f, nerr := conn.Next(); nerr == nil && f.Type == session.Error {
			return guardianErr(c.ID(), f.Payload)
		}
		return c.sessionErr(ctx, err)
	}
	// One write: the guardian reads the frames and the sync together, so
	// a leader that exits on the input (after an EOF) can't end the
	// session between them.
	var b []byte
	for _, f := range frames {
		b = session.AppendFrame(b, f.Type, f.Payload)
	}
	if err := conn.SendRaw(session.AppendFrame(b, session.Sync, nil)); err != nil {
		return sendErr(err)
	}
	for {
		f, err := conn.Next()
		if err != nil {
			return c.sessionErr(ctx, err)
		}
		switch f.Type {
		case session.Sync:
			return nil
		case session.Error:
			return guardianErr(c.ID(), f.Payload)
		case session.Exit:
			return fmt.Errorf("command %s: its leader exited before the input was taken: %w", c.ID(), api.ErrCommandFinished)
		}
	}
}

func (c *Command) sessionErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("command %s: its session ended: %w", c.ID(), api.ErrCommandFinished)
	}
	return err
}

// chunks splits p into Data frames of at most the frame limit.
func chunks(p []byte) []session.Frame {
	var fs []session.Frame
	for len(p) > 0 {
		n := min(len(p), session.MaxClientPayload)
		fs = append(fs, session.Frame{Type: session.Data, Payload: p[:n]})
		p = p[n:]
	}
	return fs
}

// Send writes p to the command's terminal (as if typed) or stdin pipe,
// without attaching, and returns once the guardian has written all of it.
// It works on a handle from Host.OpenCommand in another process.
func (c *Command) Send(ctx context.Context, p []byte) error {
	return c.oneShot(ctx, chunks(p)...)
}

// CloseStdin closes the command's stdin pipe (the workload reads EOF);
// on a terminal it types the end-of-file character (^D).
func (c *Command) CloseStdin(ctx context.Context) error {
	return c.oneShot(ctx, session.Frame{Type: session.EOF})
}

// Resize sets the size of the command's terminal (the workload gets
// SIGWINCH).
func (c *Command) Resize(ctx context.Context, cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("terminal size %dx%d: give columns and rows above 0: %w", cols, rows, api.ErrInvalid)
	}
	return c.oneShot(ctx, session.Frame{Type: session.Resize, Payload: session.ResizePayload(cols, rows)})
}

// TTY reports whether the session is a terminal (else a stdin pipe).
func (s *Session) TTY() bool { return s.tty }

// Offset is the log offset (of the command's stdout file) of the next
// byte Read returns.
func (s *Session) Offset() int64 { return s.off }

// ReplayEnd is the log offset where the replay ends and live output
// begins (the log's end at attach).
func (s *Session) ReplayEnd() int64 { return s.end }

// Read reads output; io.EOF once the leader has exited and its output was
// read (see Exit), or when the session ended.
func (s *Session) Read(p []byte) (int, error) {
	for len(s.rbuf) == 0 {
		if s.rerr != nil {
			return 0, s.rerr
		}
		f, err := s.conn.Next()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			s.rerr = err
			continue
		}
		switch f.Type {
		case session.Output:
			s.rbuf = f.Payload
		case session.Skip:
			to, err := session.ParseSkip(f.Payload)
			if err != nil {
				s.rerr = err
				continue
			}
			s.rbuf = fmt.Appendf(nil, "\r\n[hostfork: this client fell behind; %d bytes skipped, they are in the log]\r\n", to-s.off)
			s.off = to - int64(len(s.rbuf))
		case session.Exit:
			s.ended = true
			s.rerr = io.EOF
		case session.Error:
			s.rerr = guardianErr(s.c.ID(), f.Payload)
		}
	}
	n := copy(p, s.rbuf)
	s.rbuf = s.rbuf[n:]
	s.off += int64(n)
	return n, nil
}

// Write sends p as input, in frames of at most the frame limit.
func (s *Session) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	done := 0
	for _, f := range chunks(p) {
		if err := s.conn.Send(f.Type, f.Payload); err != nil {
			return done, err
		}
		done += len(f.Payload)
	}
	return done, nil
}

// Resize sets the terminal's size.
func (s *Session) Resize(cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("terminal size %dx%d: give columns and rows above 0: %w", cols, rows, api.ErrInvalid)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.conn.Send(session.Resize, session.ResizePayload(cols, rows))
}

// CloseStdin closes the stdin pipe, or types ^D on a terminal.
func (s *Session) CloseStdin() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.conn.Send(session.EOF, nil)
}

// Close detaches; the command runs on.
func (s *Session) Close() error { return s.conn.Close() }

// Ended reports whether Read's io.EOF came from the leader's exit (true)
// or from the session's end without it (the guardian is gone).
func (s *Session) Ended() bool { return s.ended }

// Exit waits for the leader's exit and returns the command's record: its
// status, and whether hostfork stopped it (the same record as Wait).
// Call it after Read returned io.EOF.
func (s *Session) Exit(ctx context.Context) (CommandRecord, error) {
	return s.c.Wait(ctx)
}
