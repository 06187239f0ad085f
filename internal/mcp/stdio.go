package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessage bounds one inbound JSON-RPC message (one line).
const MaxMessage = 4 << 20

// JSON-RPC error codes the guard answers with.
const (
	codeParse   = -32700
	codeInvalid = -32600
)

// stdio is the transport `hostfork mcp` serves on (issue 39, item 13): the
// SDK's newline-delimited JSON over stdin and stdout, behind a guard that
// keeps one bad message from ending the session and EOF from dropping
// work. Every inbound line is checked first: one that is not JSON, is a
// batch (an array), is not an object or is longer than MaxMessage is
// answered with a JSON-RPC error and skipped, and the session goes on.
// The ids of requests passed on are remembered until their response is
// written; when stdin ends, the SDK sees EOF only after every one of them
// has been answered (or ctx ends), so a piped `tools/call` is carried out
// and answered, not cancelled.
type stdio struct {
	in  io.Reader
	out io.Writer

	wmu sync.Mutex // one message per write, from the SDK or the guard

	mu      sync.Mutex
	pending map[string]bool
	drained chan struct{} // closed when pending empties after EOF
	eof     bool
}

func newStdio(in io.Reader, out io.Writer) *stdio {
	return &stdio{in: in, out: out, pending: map[string]bool{}}
}

// transport starts the guard's reader and returns the SDK's transport
// over it. The reader ends with ctx.
func (s *stdio) transport(ctx context.Context) sdk.Transport {
	pr, pw := io.Pipe()
	go s.pump(ctx, pw)
	return &sdk.IOTransport{Reader: pr, Writer: writerFunc(s.write), MaxLineLength: -1}
}

// header is what the guard reads of a message.
type header struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

func (s *stdio) pump(ctx context.Context, pw *io.PipeWriter) {
	r := bufio.NewReaderSize(s.in, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			s.pass(pw, line, tooLong)
		}
		if err != nil {
			break
		}
	}
	s.mu.Lock()
	s.eof = true
	wait := len(s.pending) > 0
	if wait {
		s.drained = make(chan struct{})
	}
	drained := s.drained
	s.mu.Unlock()
	if wait {
		select {
		case <-drained:
		case <-ctx.Done():
		}
	}
	pw.Close()
}

// readLine reads one line, keeping at most MaxMessage bytes of it.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxMessage {
			tooLong = true
		} else {
			line = append(line, chunk...)
		}
		if err != bufio.ErrBufferFull {
			return line, tooLong, err
		}
	}
}

// pass forwards one valid message to the SDK or answers a bad one.
func (s *stdio) pass(pw *io.PipeWriter, line []byte, tooLong bool) {
	trimmed := bytes.TrimSpace(line)
	switch {
	case tooLong:
		s.reject(nil, codeInvalid, "message longer than 4 MiB: refused; send smaller requests (read large output with logs and an offset)")
		return
	case !json.Valid(trimmed):
		s.reject(nil, codeParse, "not valid JSON: one JSON-RPC message per line")
		return
	case trimmed[0] == '[':
		s.reject(nil, codeInvalid, "batches are not supported: send one JSON-RPC message per line")
		return
	case trimmed[0] != '{':
		s.reject(nil, codeInvalid, "a JSON-RPC message is a JSON object")
		return
	}
	var h header
	if err := json.Unmarshal(trimmed, &h); err != nil {
		s.reject(nil, codeInvalid, "not a JSON-RPC message: "+err.Error())
		return
	}
	if h.Method != "" && len(h.ID) > 0 && string(h.ID) != "null" {
		s.mu.Lock()
		s.pending[string(h.ID)] = true
		s.mu.Unlock()
	}
	if h.Method == "notifications/cancelled" && len(h.Params.RequestID) > 0 {
		// A cancelled request may get no response.
		s.done(h.Params.RequestID)
	}
	if _, err := pw.Write(append(trimmed, '\n')); err != nil {
		s.done(h.ID)
	}
}

// reject answers a message the SDK never sees.
func (s *stdio) reject(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	_, _ = s.write(append(b, '\n'))
}

// write sends one message (the SDK writes each whole, with its newline)
// and settles the request it answers.
func (s *stdio) write(b []byte) (int, error) {
	s.wmu.Lock()
	n, err := s.out.Write(b)
	s.wmu.Unlock()
	var h header
	if json.Unmarshal(bytes.TrimSpace(b), &h) == nil && h.Method == "" && len(h.ID) > 0 {
		s.done(h.ID)
	}
	return n, err
}

func (s *stdio) done(id json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, string(id))
	if s.eof && len(s.pending) == 0 && s.drained != nil {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// writerFunc is an io.WriteCloser whose Close does nothing (stdout stays
// open for whoever else writes to it).
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
func (f writerFunc) Close() error                { return nil }
