package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/capture"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Capture waits for the leader and returns the captured output and the
// record, final when the tree ended with the leader: at most
// the limit per stream; the first validated workload exit starts the
// fixed FinalDrain, which output can't extend, so a descendant that keeps
// a pipe open can't withhold the result. An incomplete capture leaves a
// capture receipt beside the artifacts, and the stream states go into the
// record.
func (r *Running) Capture(ctx context.Context) (*api.CaptureResult, error) {
	if !r.capOut.Keeps() {
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
	res := &api.CaptureResult{Record: rec, Stdout: r.capOut.Result(rec.StdoutPath), Stderr: r.capErr.Result(rec.StderrPath)}
	r.recordCapture(ctx, res)
	return res, nil
}

// recordCapture stores the per-stream states on the command record (in
// memory now, in the registry with the final record) and, for an
// incomplete capture, writes an identity-bearing receipt
// (capture.Receipt).
func (r *Running) recordCapture(ctx context.Context, res *api.CaptureResult) {
	states := capture.Receipt(res)
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
