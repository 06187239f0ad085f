package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/capture"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
)

// FinalDrain is how long output is still forwarded after the leader exits
// (DESIGN.md, Capture): descendants that keep a pipe open can't hold back
// the result.
const FinalDrain = 200 * time.Millisecond

// MaxCapture is the most output kept in memory per stream for a caller
// that takes the output back. The artifact files keep everything.
const MaxCapture = 16 << 20

// Running is a command this process launched: it follows the guardian's
// events, forwards pipe output, and records the result when the tree has
// exited (with the environment's stop, for a run).
type Running struct {
	e        *Engine
	env      api.Env
	g        *supervise.Guardian
	lg       *limits.Group
	intents  []*registry.Intent
	autoStop bool

	mu  sync.Mutex
	id  string       // the command's id (never changes)
	rec *api.Command // as observed; replaced, never changed in place
	// committed is the record as the registry holds it (its revision).
	committed api.Command
	// envFinal is the environment's record after a run's stop.
	envFinal *api.Env
	finalErr error
	// capture is what Capture observed; finishing is set once finish has
	// taken the record it commits.
	capture   map[string]api.StreamCapture
	finishing bool

	started    chan struct{} // the guardian reported the workload's start (or its failure)
	leaderDone chan struct{}
	// treeSeen is closed when the guardian reports that no process of the
	// tree is left (its tree or exec-failed event), before the result is
	// recorded; never otherwise.
	treeSeen   chan struct{}
	treeDone   chan struct{}
	fwd        sync.WaitGroup
	forwarding bool
	capOut     *capture.Stream
	capErr     *capture.Stream
}

func newRunning(l *launch, env *api.Env) *Running {
	r := &Running{e: l.e, env: *env, g: l.g, lg: l.lg, intents: l.intents, autoStop: l.cs.AutoStop,
		id: l.rec.ID, rec: l.rec, committed: *l.rec, started: make(chan struct{}), leaderDone: make(chan struct{}), treeSeen: make(chan struct{}), treeDone: make(chan struct{})}
	if l.g.ForwardOut != nil {
		r.forwarding = true
		limit := 0
		if l.cs.Capture {
			limit = l.cs.CaptureLimit
			if limit <= 0 {
				limit = MaxCapture
			}
		}
		r.capOut, r.capErr = capture.New(limit), capture.New(limit)
		r.forward(l.g.ForwardOut, l.cs.Stdout, r.capOut)
		r.forward(l.g.ForwardErr, l.cs.Stderr, r.capErr)
	}
	l.e.track(r)
	return r
}

// ID is the command's id.
func (r *Running) ID() string { return r.id }

// Record is the command's record as last observed, with the reader's
// computed fields.
func (r *Running) Record() api.Command {
	r.mu.Lock()
	c := *r.rec
	env := r.env
	if r.envFinal != nil {
		env = *r.envFinal
	}
	r.mu.Unlock()
	c.Labels = maps.Clone(c.Labels)
	c.Capture = maps.Clone(c.Capture)
	r.e.compute(&c, &env)
	return c
}

// Env is the environment's record: after a run's stop, the stopped one.
func (r *Running) Env() api.Env {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.envFinal != nil {
		return *r.envFinal
	}
	return r.env
}

// LeaderDone is closed when the leader's exit was observed.
func (r *Running) LeaderDone() <-chan struct{} { return r.leaderDone }

// TreeSeen is closed when the guardian has reported that no process of
// the tree is left, before the result is recorded (TreeDone follows once
// it is). A guardian that ends without that report never closes it.
func (r *Running) TreeSeen() <-chan struct{} { return r.treeSeen }

// TreeDone is closed when the tree's exit was observed and recorded.
func (r *Running) TreeDone() <-chan struct{} { return r.treeDone }

// RecordErr is why the final record could not be written (nil: written).
func (r *Running) RecordErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finalErr
}

// Signal asks the guardian to send sig to the leader (only).
func (r *Running) Signal(sig syscall.Signal) error { return r.g.Signal(sig) }

// Pipes reports whether output is streamed (pipe mode).
func (r *Running) Pipes() bool { return r.forwarding }

// forward copies a forwarded stream to w until EOF, or until the final
// drain after leader exit has passed.
func (r *Running) forward(src *os.File, w io.Writer, st *capture.Stream) {
	if w == nil {
		w = io.Discard
	}
	r.fwd.Add(1)
	go func() {
		defer r.fwd.Done()
		defer src.Close()
		st.Copy(w, src)
	}()
}

// endForwarding gives forwarded output the fixed final drain, then stops.
func (r *Running) endForwarding() {
	if !r.forwarding {
		return
	}
	done := make(chan struct{})
	go func() { r.fwd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(FinalDrain):
		// Descendants still hold the pipe: stop reading. The guardian keeps
		// writing the files; its forward copy gets EPIPE.
		for _, f := range []*os.File{r.g.ForwardOut, r.g.ForwardErr} {
			_ = f.SetReadDeadline(time.Now())
		}
		<-done
	}
}

// watch follows the guardian's events: each is a wakeup to read the
// verified receipt, so live events and later settlement share one merge.
// Nothing is committed until the tree has exited.
func (r *Running) watch() {
	evs := r.g.Events()
	startClosed := false
	closeStart := func() {
		if !startClosed {
			startClosed = true
			close(r.started)
		}
	}
	leaderClosed := false
	closeLeader := func() {
		if !leaderClosed {
			leaderClosed = true
			r.endForwarding()
			close(r.leaderDone)
		}
	}
	for ev := range evs {
		for more := true; more; {
			select {
			case e2, ok := <-evs:
				if !ok {
					more = false
				} else {
					ev = e2
				}
			default:
				more = false
			}
		}
		r.observe(decide.Alive, ev.Kind)
		closeStart()
		if ev.Kind == "tree" || ev.Kind == "exec-failed" {
			// Before the leader's wait ends, so a caller deciding
			// whether anything was left behind finds this already.
			close(r.treeSeen)
		}
		if ev.Kind == "leader" || ev.Kind == "exec-failed" || ev.Kind == "tree" {
			closeLeader()
		}
		if ev.Kind == "tree" || ev.Kind == "exec-failed" {
			break
		}
	}
	_, _ = r.g.Reap()
	r.observe(decide.Gone, "")
	r.end(startClosed, leaderClosed)
}

// end records the result once the guardian is gone and ends every wait:
// the start's and the leader's (unless already ended), then, with the
// record written, the tree's.
func (r *Running) end(startClosed, leaderClosed bool) {
	if !startClosed {
		close(r.started)
	}
	if !leaderClosed {
		r.endForwarding()
		close(r.leaderDone)
	}
	r.finish()
	r.e.untrack(r.id)
	close(r.treeDone)
}

// observe re-reads the receipt and updates the in-memory record. The
// guardian's events come over its control channel, which only it holds:
// they vouch for the receipt's workload ("started") and leader facts
// ("leader", "exec-failed", "tree").
func (r *Running) observe(guardian decide.Liveness, event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := evidence.Gather(&r.env, r.rec)
	ev.Guardian = guardian
	switch event {
	case "started":
		ev.WorkloadVerified = true
	case "leader", "exec-failed", "tree":
		ev.WorkloadVerified, ev.LeaderGone = true, true
	}
	if guardian == decide.Gone {
		evidence.OOM(&r.env, r.rec, r.lg, &ev)
	}
	n, _ := decide.Command(*r.rec, ev)
	r.rec = &n
}

// unreleased records a launch whose release failed, its guardian reaped
// (Guardian.Abort): the guardian started nothing, and its empty receipt
// proves it (decide.Evidence.Unreleased). The record is a stop before the
// start when a stop reached the guardian at its gate, a failure with
// cause otherwise (recorded, and left to the caller to return). It
// reports whether the record is a stop; if not, the waits are ended as by
// abandonWatch.
func (r *Running) unreleased(cause error) bool {
	r.observe(decide.Gone, "")
	r.mu.Lock()
	if r.rec.State == api.CommandFailed && r.rec.StopReason == "" {
		n := *r.rec
		n.Error = cause.Error()
		r.rec = &n
	}
	final := r.rec.Final()
	r.mu.Unlock()
	if !final {
		r.abandonWatch(cause)
		return false
	}
	r.end(false, false)
	// What was recorded: the stopper's record when it came first (it
	// removes its decision file once it has recorded).
	r.mu.Lock()
	stop := r.rec.StopReason != ""
	r.mu.Unlock()
	return stop
}

// abandonWatch ends the waits of a launch whose release failed.
func (r *Running) abandonWatch(err error) {
	r.mu.Lock()
	r.finalErr = err
	r.mu.Unlock()
	close(r.started)
	close(r.leaderDone)
	close(r.treeDone)
	r.e.untrack(r.id)
}

// finish records the result: the command's final record, its cgroups
// removed and its intents settled, and for a run the environment's stop,
// all in one commit. On a conflict (a reader or a stopper recorded
// something first) it reads the record again and decides again from the
// same evidence.
func (r *Running) finish() {
	ctx := context.Background()
	e := r.e
	r.mu.Lock()
	obs := *r.rec
	if r.capture != nil {
		obs.Capture = r.capture
	}
	r.finishing = true
	r.mu.Unlock()
	cleanup := e.removeCommandGroups(ctx, &obs, r.lg)
	var envNext *api.Env
	var envFacts envFinish
	if r.autoStop {
		reason := cmp.Or(obs.StopReason, api.ReasonCompleted)
		envFacts = e.finishEnv(ctx, &r.env, reason, obs.ID)
	}
	var err error
	cur := &obs
	cur.CleanupErrors = append(append([]string{}, obs.CleanupErrors...), cleanup...)
	base := r.committed
	for try := 0; try < 8; try++ {
		var b registry.Batch
		b.UpdateCommand(&base, cur)
		records.SettleAll(&b, r.intents, nil)
		if r.autoStop {
			envCur, eerr := e.reg.Env(ctx, r.env.ID)
			if eerr != nil {
				err = eerr
				break
			}
			envNext = envFacts.next(envCur)
			if envNext != nil {
				b.UpdateEnv(envCur, envNext)
				envFacts.settle(&b)
			}
		}
		err = e.reg.Commit(ctx, &b)
		if err == nil || !errors.Is(err, registry.ErrConflict) {
			break
		}
		// Someone recorded something first: decide again from the newer
		// record and the same evidence.
		fresh, rerr := e.reg.Command(ctx, obs.ID)
		if rerr != nil {
			err = rerr
			break
		}
		ev := evidence.Gather(&r.env, fresh)
		ev.Guardian = decide.Gone
		// The command's own groups are gone: its OOM verdict is the one
		// read before they were removed.
		ev.OOM, ev.OOMEvidence = obs.OOM, obs.OOMEvidence
		n, _ := decide.Command(*fresh, ev)
		if !n.Final() {
			n = *cur
			n.Rev = fresh.Rev
		}
		if n.Capture == nil {
			n.Capture = obs.Capture
		}
		n.CleanupErrors = append(append([]string{}, fresh.CleanupErrors...), cleanup...)
		base, cur = *fresh, &n
	}
	r.mu.Lock()
	if r.capture != nil {
		cur.Capture = r.capture
	}
	r.rec = cur
	r.finalErr = err
	if envNext != nil {
		r.envFinal = envNext
	}
	snapshot := *cur
	snapshot.Capture = maps.Clone(cur.Capture)
	r.mu.Unlock()
	if r.autoStop {
		e.reg.WriteManifest(ctx, r.env.ID)
	} else {
		records.WriteCommandRecord(&snapshot)
	}
}

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
	// one more drain to say so, so the result carries the final record
	// (its OOM and stop facts), as the stored one does; once the guardian
	// has said it, the record is waited for however long its commit takes
	// under load. A tree that lives on returns the live record (Final()
	// false); WaitTree gives the final one.
	select {
	case <-r.treeDone:
	case <-r.treeSeen:
		select {
		case <-r.treeDone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
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
