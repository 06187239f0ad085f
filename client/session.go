package client

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/habemus-papadum/hostfork/api"
)

// Send types p into the command's terminal or writes it to its stdin pipe
// (POST /v1/commands/{id}/input), returning once the guardian wrote it.
func (c *Client) Send(ctx context.Context, id string, p []byte) error {
	req := InputRequest{Text: string(p)}
	if !utf8.Valid(p) {
		req = InputRequest{Base64: base64.StdEncoding.EncodeToString(p)}
	}
	return c.call(ctx, http.MethodPost, "/v1/commands/"+esc(id)+"/input", nil, req, nil)
}

// CloseStdin closes the command's stdin pipe (^D on a terminal).
func (c *Client) CloseStdin(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/v1/commands/"+esc(id)+"/input", nil, InputRequest{EOF: true}, nil)
}

// Resize sets the size of the command's terminal.
func (c *Client) Resize(ctx context.Context, id string, cols, rows uint16) error {
	return c.call(ctx, http.MethodPost, "/v1/commands/"+esc(id)+"/resize", nil, ResizeRequest{Cols: cols, Rows: rows}, nil)
}

// AttachOptions are Attach's options.
type AttachOptions struct {
	// Replay is how many bytes of the latest output come first; nil: the
	// server's default (64 KiB, enough to redraw a screen).
	Replay *int64
	// NoStdin attaches to watch only.
	NoStdin bool
}

// Session is a client attached to a command's session through the
// server's WebSocket (GET /v1/commands/{id}/attach). Read returns the
// replay, then live output, until the leader exits (io.EOF; then Exit
// says how). Write types input. The session lives in the command's
// guardian: Close (or a lost connection, a restarted server) leaves it
// running, and a new Attach continues.
type Session struct {
	ws        *websocket.Conn
	ctx       context.Context
	cancel    context.CancelFunc
	tty       bool
	offset    int64
	replayEnd int64
	wmu       sync.Mutex
	rbuf      []byte
	rerr      error
	exited    bool
	code, sig int
}

// Attach attaches to the command's session. A command without a session
// returns an error matching api.ErrNoSession; one whose leader has
// exited, api.ErrCommandFinished.
func (c *Client) Attach(ctx context.Context, id string, o AttachOptions) (*Session, error) {
	q := url.Values{}
	if o.Replay != nil {
		q.Set("replay", strconv.FormatInt(*o.Replay, 10))
	}
	if o.NoStdin {
		q.Set("no_stdin", "1")
	}
	u := "ws" + strings.TrimPrefix(c.base, "http") + "/v1/commands/" + esc(id) + "/attach"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc})
	if err != nil {
		cancel()
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Header.Get(VersionHeader) != "" {
			return nil, decodeError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("hostfork server %s: attach: %w", c.where(), err)
	}
	ws.SetReadLimit(1 << 20)
	s := &Session{ws: ws, ctx: sctx, cancel: cancel}
	typ, msg, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || len(msg) != 18 || msg[0] != FrameWelcome {
		s.Close()
		if err == nil {
			err = fmt.Errorf("the server's first frame is not a welcome: %w", api.ErrInvalid)
		}
		return nil, fmt.Errorf("attach to %s: %w", id, err)
	}
	s.tty = msg[1] == 1
	s.offset = int64(binary.BigEndian.Uint64(msg[2:]))
	s.replayEnd = int64(binary.BigEndian.Uint64(msg[10:]))
	return s, nil
}

// TTY reports whether the session is a terminal (else a stdin pipe).
func (s *Session) TTY() bool { return s.tty }

// Offset is the log offset of the next byte Read returns.
func (s *Session) Offset() int64 { return s.offset }

// ReplayEnd is the log offset where the replay ends and live output
// begins.
func (s *Session) ReplayEnd() int64 { return s.replayEnd }

// Read reads output: io.EOF once the leader exited and all its output was
// read (Exit then says how), or when the connection ended (an error).
func (s *Session) Read(p []byte) (int, error) {
	for len(s.rbuf) == 0 {
		if s.rerr != nil {
			return 0, s.rerr
		}
		typ, msg, err := s.ws.Read(s.ctx)
		switch {
		case err != nil:
			if s.exited || websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				err = io.EOF
			}
			s.rerr = err
		case typ != websocket.MessageBinary || len(msg) == 0:
		case msg[0] == FrameOutput:
			s.rbuf = msg[1:]
		case msg[0] == FrameExit && len(msg) == 9:
			s.exited = true
			s.code = int(int32(binary.BigEndian.Uint32(msg[1:])))
			s.sig = int(int32(binary.BigEndian.Uint32(msg[5:])))
		}
	}
	n := copy(p, s.rbuf)
	s.rbuf = s.rbuf[n:]
	s.offset += int64(n)
	return n, nil
}

// Exit is the leader's exit code (-1: none) and signal (0: none), once
// Read returned io.EOF; ok is false before (or when the connection ended
// without the exit).
func (s *Session) Exit() (code, signal int, ok bool) { return s.code, s.sig, s.exited }

// send writes one frame.
func (s *Session) send(typ byte, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.ws.Write(s.ctx, websocket.MessageBinary, append([]byte{typ}, payload...))
}

// Write types p, in frames of at most MaxInputFrame bytes.
func (s *Session) Write(p []byte) (int, error) {
	done := 0
	for len(p) > 0 {
		n := min(len(p), MaxInputFrame)
		if err := s.send(FrameData, p[:n]); err != nil {
			return done, err
		}
		done += n
		p = p[n:]
	}
	return done, nil
}

// Resize sets the terminal's size.
func (s *Session) Resize(cols, rows uint16) error {
	if cols == 0 || rows == 0 {
		return fmt.Errorf("terminal size %dx%d: give columns and rows above 0: %w", cols, rows, api.ErrInvalid)
	}
	return s.send(FrameResize, []byte{byte(cols >> 8), byte(cols), byte(rows >> 8), byte(rows)})
}

// CloseStdin ends the input (^D on a terminal).
func (s *Session) CloseStdin() error { return s.send(FrameEOF, nil) }

// Close detaches; the command runs on.
func (s *Session) Close() error {
	defer s.cancel()
	// A close handshake the server can't answer (it is gone) still
	// detaches: the connection is released either way.
	_ = s.ws.Close(websocket.StatusNormalClosure, "detached")
	return nil
}
