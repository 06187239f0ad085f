// Package capture keeps what was observed of a command's forwarded output
// streams (at most a limit of bytes each, with the stream's state:
// complete, incomplete or failed) and writes the capture receipt that an
// incomplete capture leaves beside the artifacts.
//
// Only the engine imports it.
package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/atomicfile"
)

// Capture states of one stream.
const (
	// Complete: the stream reached EOF and every byte is in Data.
	Complete = "complete"
	// Incomplete: Data lacks bytes — the buffer limit was passed, or a
	// descendant still held the stream when the final drain ended.
	Incomplete = "incomplete"
	// Failed: reading the stream failed.
	Failed = "failed"
)

// Stream is what was observed of one forwarded stream. With a zero limit
// nothing is kept (the output only streams to its writer and the
// artifact).
type Stream struct {
	mu        sync.Mutex
	limit     int
	data      []byte
	total     int64
	overflow  bool
	eof       bool
	err       error
	cutByStop bool
}

// New is a Stream that keeps at most limit bytes.
func New(limit int) *Stream { return &Stream{limit: limit} }

// Keeps reports whether the stream keeps any bytes (a limit above zero).
func (s *Stream) Keeps() bool { return s != nil && s.limit > 0 }

// Add counts b, and keeps what fits under the limit.
func (s *Stream) Add(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total += int64(len(b))
	if s.limit == 0 {
		return
	}
	if room := s.limit - len(s.data); room > 0 {
		if len(b) > room {
			b = b[:room]
			s.overflow = true
		}
		s.data = append(s.data, b...)
	} else if len(b) > 0 {
		s.overflow = true
	}
}

// Copy copies src to w until src ends, observing every byte (Add) and
// how it ended (Finish). w's errors are ignored: a caller that stopped
// reading does not end the capture.
func (s *Stream) Copy(w io.Writer, src io.Reader) {
	buf := make([]byte, 128<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			s.Add(buf[:n])
		}
		if err != nil {
			s.Finish(err)
			return
		}
	}
}

// Finish records how reading ended: io.EOF, a read deadline (the final
// drain ended), or a failure.
func (s *Stream) Finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == io.EOF:
		s.eof = true
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.cutByStop = true
	default:
		s.err = err
	}
}

// Result is the stream's result, its full copy being at artifact.
func (s *Stream) Result(artifact string) api.StreamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := api.StreamResult{Data: s.data, Bytes: s.total, Artifact: artifact}
	switch {
	case s.err != nil:
		r.State, r.Error = Failed, s.err.Error()
	case s.overflow:
		r.State = Incomplete
		r.Error = fmt.Sprintf("more than %d bytes; the rest is only in the artifact", s.limit)
	case s.cutByStop || !s.eof:
		r.State = Incomplete
		r.Error = "a process still held the stream when the final drain ended"
	default:
		r.State = Complete
	}
	return r
}

// Receipt returns the per-stream states of res for its command's record
// and, for an incomplete capture, writes an identity-bearing receipt
// beside the artifacts (res.Receipt; res.ReceiptError if it could not be
// written).
func Receipt(res *api.CaptureResult) map[string]api.StreamCapture {
	states := map[string]api.StreamCapture{
		"stdout": {State: res.Stdout.State, Bytes: res.Stdout.Bytes, Error: res.Stdout.Error},
		"stderr": {State: res.Stderr.State, Bytes: res.Stderr.Bytes, Error: res.Stderr.Error},
	}
	if !res.Complete() {
		res.Receipt = filepath.Join(res.Record.Dir, "capture-receipt.json")
		prefix := func(b []byte) []byte {
			if len(b) > 4096 {
				b = b[:4096]
			}
			return b
		}
		status, ok := res.Record.ExitStatus()
		receipt := map[string]any{
			"command_id":    res.Record.ID,
			"env_id":        res.Record.Env,
			"workload":      res.Record.Workload,
			"guardian":      res.Record.Guardian,
			"exit_status":   status,
			"exit_observed": ok,
			"streams":       states,
			"stdout_path":   res.Stdout.Artifact,
			"stderr_path":   res.Stderr.Artifact,
			"stdout_prefix": prefix(res.Stdout.Data), // base64 in JSON: bytes kept exact
			"stderr_prefix": prefix(res.Stderr.Data),
			"written_at":    time.Now().UTC(),
		}
		// Evidence, not a copy: written durably, and a receipt that could
		// not be written is said in the result (issue 35, §2).
		if b, err := json.MarshalIndent(receipt, "", "  "); err != nil {
			res.ReceiptError = err.Error()
		} else if err := atomicfile.WriteFile(res.Receipt, append(b, '\n'), 0o600); err != nil {
			res.ReceiptError = err.Error()
		}
	}
	return states
}
