package hostfork

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

	"github.com/habemus-papadum/hostfork/internal/registry"
)

// MaxCapture is the most output kept in memory per stream for a caller
// that takes the output back (DESIGN.md, Capture). The artifact files keep
// everything.
const MaxCapture = 16 << 20

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

// ErrIncompleteCapture is returned by output-parsing helpers when the
// captured output is not the whole output.
var ErrIncompleteCapture = errors.New("captured output is incomplete")

// StreamCapture is what was observed of one forwarded stream.
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

func newStreamCapture(limit int) *StreamCapture {
	return &StreamCapture{limit: limit}
}

func (c *Command) captureLimit() int {
	if c.CaptureLimit > 0 {
		return c.CaptureLimit
	}
	return MaxCapture
}

func (s *StreamCapture) add(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total += int64(len(b))
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

// StreamResult is one stream of a CaptureResult.
type StreamResult struct {
	Data  []byte `json:"-"`
	State string `json:"state"`
	// Bytes counts every byte observed, also those beyond the buffer.
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
	// Artifact is the file that holds the whole stream.
	Artifact string `json:"artifact"`
}

func (s *StreamCapture) result(artifact string) StreamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := StreamResult{Data: s.data, Bytes: s.total, Artifact: artifact}
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

// CaptureResult is a command's result together with its captured output.
type CaptureResult struct {
	Record registry.Command `json:"record"`
	Stdout StreamResult     `json:"stdout"`
	Stderr StreamResult     `json:"stderr"`
	// Receipt is the capture receipt written for an incomplete capture.
	Receipt string `json:"receipt,omitempty"`
}

// Complete reports whether both streams were captured whole.
func (r *CaptureResult) Complete() bool {
	return r.Stdout.State == CaptureComplete && r.Stderr.State == CaptureComplete
}

// Text returns stdout as a string, refusing an incomplete capture.
func (r *CaptureResult) Text() (string, error) {
	if r.Stdout.State != CaptureComplete {
		return "", fmt.Errorf("stdout of command %s is %s (%s; see %s): %w", r.Record.ID, r.Stdout.State, r.Stdout.Error, r.Stdout.Artifact, ErrIncompleteCapture)
	}
	return string(r.Stdout.Data), nil
}

// JSON decodes stdout into v, refusing an incomplete capture.
func (r *CaptureResult) JSON(v any) error {
	s, err := r.Text()
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), v)
}

// Capture starts the command in pipe mode (if not started), waits for its
// leader, and returns the captured output: at most CaptureLimit bytes per
// stream; the first validated workload exit starts the fixed FinalDrain,
// which output can't extend, so a descendant that keeps a pipe open can't
// withhold the result. Each stream reports complete, incomplete or failed;
// an incomplete capture leaves a capture receipt beside the artifacts.
// Descendants are not stopped to get EOF: use WaitTree or StopTree.
func (c *Command) Capture(ctx context.Context) (*CaptureResult, error) {
	if c.rec == nil {
		c.Output = OutputPipe
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
	}
	if c.capOut == nil {
		return nil, errors.New("hostfork: Capture needs output mode pipe")
	}
	rec, err := c.Wait(ctx)
	if err != nil {
		return nil, err
	}
	res := &CaptureResult{
		Record: rec,
		Stdout: c.capOut.result(rec.StdoutPath),
		Stderr: c.capErr.result(rec.StderrPath),
	}
	c.recordCapture(ctx, res)
	res.Record = c.Record()
	return res, nil
}

// recordCapture stores the per-stream states on the command record and,
// for an incomplete capture, writes an identity-bearing receipt.
func (c *Command) recordCapture(ctx context.Context, res *CaptureResult) {
	h := c.env.h
	states := map[string]registry.StreamCapture{
		"stdout": {State: res.Stdout.State, Bytes: res.Stdout.Bytes, Error: res.Stdout.Error},
		"stderr": {State: res.Stderr.State, Bytes: res.Stderr.Bytes, Error: res.Stderr.Error},
	}
	if !res.Complete() {
		res.Receipt = filepath.Join(res.Record.Dir, "capture-receipt.json")
		prefix := func(b []byte) string {
			if len(b) > 4096 {
				b = b[:4096]
			}
			return string(b)
		}
		status, ok := ExitStatus(res.Record)
		receipt := map[string]any{
			"command_id":    res.Record.ID,
			"env_id":        res.Record.EnvID,
			"workload":      res.Record.Workload,
			"guardian":      res.Record.Guardian,
			"exit_status":   status,
			"exit_observed": ok,
			"streams":       states,
			"stdout_path":   res.Stdout.Artifact,
			"stderr_path":   res.Stderr.Artifact,
			"stdout_prefix": prefix(res.Stdout.Data),
			"stderr_prefix": prefix(res.Stderr.Data),
			"written_at":    time.Now().UTC(),
		}
		if b, err := json.MarshalIndent(receipt, "", "  "); err == nil {
			_ = os.WriteFile(res.Receipt, append(b, '\n'), 0o600)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for try := 0; try < 5; try++ {
		n := *c.rec
		n.Capture = states
		err := h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.UpdateCommand(&n) })
		if err == nil {
			c.rec = &n
			return
		}
		if !errors.Is(err, registry.ErrConflict) {
			return
		}
		if cur, err := h.reg.Command(ctx, c.rec.ID); err == nil {
			c.rec = cur
		}
	}
}
