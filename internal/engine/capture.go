package engine

import (
	"context"
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
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Capture states of one stream.
const (
	// CaptureComplete: the stream reached EOF and every byte is in Data.
	CaptureComplete = "complete"
	// CaptureIncomplete: Data lacks bytes — the buffer limit was passed, or
	// a descendant still held the stream when the final drain ended.
	CaptureIncomplete = "incomplete"
	// CaptureFailed: reading the stream failed.
	CaptureFailed = "failed"
)

// StreamCapture is what was observed of one forwarded stream. With a zero
// limit nothing is kept (the output only streams to its writer and the
// artifact).
type StreamCapture struct {
	mu        sync.Mutex
	limit     int
	data      []byte
	total     int64
	overflow  bool
	eof       bool
	err       error
	cutByStop bool
}

func newStreamCapture(limit int) *StreamCapture { return &StreamCapture{limit: limit} }

func (s *StreamCapture) add(b []byte) {
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

func (s *StreamCapture) finish(err error) {
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

func (s *StreamCapture) result(artifact string) api.StreamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := api.StreamResult{Data: s.data, Bytes: s.total, Artifact: artifact}
	switch {
	case s.err != nil:
		r.State, r.Error = CaptureFailed, s.err.Error()
	case s.overflow:
		r.State = CaptureIncomplete
		r.Error = fmt.Sprintf("more than %d bytes; the rest is only in the artifact", s.limit)
	case s.cutByStop || !s.eof:
		r.State = CaptureIncomplete
		r.Error = "a process still held the stream when the final drain ended"
	default:
		r.State = CaptureComplete
	}
	return r
}

// Capture waits for the leader and returns the captured output and the
// record, final when the tree ended with the leader: at most
// the limit per stream; the first validated workload exit starts the
// fixed FinalDrain, which output can't extend, so a descendant that keeps
// a pipe open can't withhold the result. An incomplete capture leaves a
// capture receipt beside the artifacts, and the stream states go into the
// record.
func (r *Running) Capture(ctx context.Context) (*api.CaptureResult, error) {
	if r.capOut == nil || r.capOut.limit == 0 {
		return nil, fmt.Errorf("this command was not started to capture its output (pipe mode with capture): %w", api.ErrInvalid)
	}
	select {
	case <-r.leaderDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.e.closed:
		return nil, api.ErrClosed
	}
	// A tree that ends with its leader is settled within moments: give it
	// one more drain, so the result carries the final record (its OOM and
	// stop facts), as the stored one does. A tree that lives on returns
	// the live record (Final() false); WaitTree gives the final one.
	select {
	case <-r.treeDone:
	case <-time.After(FinalDrain):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rec := r.Record()
	res := &api.CaptureResult{Record: rec, Stdout: r.capOut.result(rec.StdoutPath), Stderr: r.capErr.result(rec.StderrPath)}
	r.recordCapture(ctx, res)
	return res, nil
}

// recordCapture stores the per-stream states on the command record (in
// memory now, in the registry with the final record) and, for an
// incomplete capture, writes an identity-bearing receipt.
func (r *Running) recordCapture(ctx context.Context, res *api.CaptureResult) {
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
	r.mu.Lock()
	r.capture = states
	n := *r.rec // replaced, not changed: a snapshot being written keeps its own
	n.Capture = states
	r.rec = &n
	late := r.finishing
	r.mu.Unlock()
	if late {
		// The final record was taken without it: add the capture to it.
		select {
		case <-r.treeDone:
		case <-ctx.Done():
			return
		}
		for try := 0; try < 5; try++ {
			cur, err := r.e.reg.Command(ctx, res.Record.ID)
			if err != nil {
				return
			}
			next := *cur
			next.Capture = states
			var b registry.Batch
			b.UpdateCommand(cur, &next)
			if err := r.e.reg.Commit(ctx, &b); err == nil || !errors.Is(err, registry.ErrConflict) {
				break
			}
		}
	}
	res.Record = r.Record()
}
