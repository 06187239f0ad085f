package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/client"
)

// input types into a command's terminal or writes to its stdin pipe
// (Command.Send), then closes its input with eof (Command.CloseStdin).
func (s *Server) input(w http.ResponseWriter, r *http.Request) (any, error) {
	var b client.InputRequest
	if err := decode(w, r, &b); err != nil {
		return nil, err
	}
	data := []byte(b.Text)
	if b.Base64 != "" {
		if b.Text != "" {
			return nil, invalid("give text or base64, not both")
		}
		var err error
		if data, err = base64.StdEncoding.DecodeString(b.Base64); err != nil {
			return nil, invalid("base64: %v", err)
		}
	}
	if len(data) == 0 && !b.EOF {
		return nil, invalid("nothing to send: give text, base64 or eof")
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	if len(data) > 0 {
		if err := c.Send(ctx, data); err != nil {
			return nil, err
		}
	}
	if b.EOF {
		if err := c.CloseStdin(ctx); err != nil {
			return nil, err
		}
	}
	return client.InputResult{Bytes: len(data), EOF: b.EOF}, nil
}

// resize sets the size of a command's terminal (Command.Resize).
func (s *Server) resize(w http.ResponseWriter, r *http.Request) (any, error) {
	var b client.ResizeRequest
	if err := decode(w, r, &b); err != nil {
		return nil, err
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	if err := c.Resize(ctx, b.Cols, b.Rows); err != nil {
		return nil, err
	}
	return b, nil
}

// attach bridges a WebSocket to the command's session through the
// library (Command.AttachWith): the guardian holds the terminal, so the
// session outlives this connection and this server. Failures before the
// upgrade (no session, a finished command) are ordinary error answers.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) (any, error) {
	var o hostfork.AttachOptions
	var err error
	if o.Replay, err = count(r, "replay", hostfork.DefaultReplay, "a number of bytes"); err != nil {
		return nil, err
	}
	if o.NoStdin, err = flag(r, "no_stdin", false); err != nil {
		return nil, err
	}
	if !websocketRequest(r) {
		return nil, withStatus(http.StatusUpgradeRequired, invalid("attach is a WebSocket (RFC 6455): send Connection: Upgrade and Upgrade: websocket"))
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.streamContext(r)
	defer cancel()
	sess, err := c.AttachWith(ctx, o)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	// Browsers never get here: a request with an Origin header was
	// refused with the others (Server.admit), so there is no origin to
	// check.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{})
	if err != nil {
		return nil, nil // Accept answered the client
	}
	defer ws.CloseNow()
	ws.SetReadLimit(client.MaxInputFrame + 1)
	kind := byte(2)
	if sess.TTY() {
		kind = 1
	}
	welcome := make([]byte, 18)
	welcome[0], welcome[1] = client.FrameWelcome, kind
	binary.BigEndian.PutUint64(welcome[2:], uint64(sess.Offset()))
	binary.BigEndian.PutUint64(welcome[10:], uint64(sess.ReplayEnd()))
	if err := ws.Write(ctx, websocket.MessageBinary, welcome); err != nil {
		return nil, nil
	}
	go s.attachInput(ctx, cancel, ws, sess)
	buf := make([]byte, 32<<10)
	buf[0] = client.FrameOutput
	for {
		n, rerr := sess.Read(buf[1:])
		if n > 0 {
			if err := ws.Write(ctx, websocket.MessageBinary, buf[:1+n]); err != nil {
				return nil, nil // the client left (or the input side ended it)
			}
		}
		if errors.Is(rerr, io.EOF) && sess.Ended() {
			exit := []byte{client.FrameExit, 0, 0, 0, 0, 0, 0, 0, 0}
			code, sig := int32(-1), int32(0)
			if rec, err := sess.Exit(ctx); err == nil {
				if rec.ExitCode != nil {
					code = int32(*rec.ExitCode)
				}
				if rec.Signal != nil {
					sig = int32(*rec.Signal)
				}
			}
			binary.BigEndian.PutUint32(exit[1:], uint32(code))
			binary.BigEndian.PutUint32(exit[5:], uint32(sig))
			if ws.Write(ctx, websocket.MessageBinary, exit) == nil {
				ws.Close(websocket.StatusNormalClosure, "the command's leader exited")
			}
			return nil, nil
		}
		if errors.Is(rerr, io.EOF) {
			// The session ended without its exit frame (its guardian
			// closed it as the command ended): a normal end, as for the
			// library's Session; the record says how the command ended.
			ws.Close(websocket.StatusNormalClosure, "the session ended")
			return nil, nil
		}
		if rerr != nil {
			if ctx.Err() == nil {
				ws.Close(websocket.StatusGoingAway, "the session ended: "+truncate(rerr.Error(), 100))
			}
			return nil, nil
		}
	}
}

// attachInput forwards the client's frames to the session until the
// client leaves or sends something the protocol doesn't allow; then it
// ends the attach (cancel).
func (s *Server) attachInput(ctx context.Context, cancel context.CancelFunc, ws *websocket.Conn, sess *hostfork.Session) {
	defer cancel()
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			return // a message over the limit closed it with 1009
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			ws.Close(websocket.StatusUnsupportedData, "send binary frames: a type byte, then the payload")
			return
		}
		p := msg[1:]
		switch msg[0] {
		case client.FrameData:
			_, err = sess.Write(p)
		case client.FrameResize:
			if len(p) != 4 {
				ws.Close(websocket.StatusPolicyViolation, "a resize frame is cols and rows, two big-endian uint16")
				return
			}
			err = sess.Resize(binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:]))
		case client.FrameEOF:
			err = sess.CloseStdin()
		default:
			ws.Close(websocket.StatusPolicyViolation, "frame type "+strconv.QuoteRune(rune(msg[0]))+": a client sends data, resize or eof")
			return
		}
		if err != nil {
			if errors.Is(err, hostfork.ErrInvalid) {
				ws.Close(websocket.StatusPolicyViolation, truncate(err.Error(), 100))
			}
			return
		}
	}
}

// websocketRequest reports whether r asks for a WebSocket upgrade.
func websocketRequest(r *http.Request) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", "websocket")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// headerHas reports whether a comma-separated header has token (case
// insensitive).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
