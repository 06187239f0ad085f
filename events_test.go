package hostfork_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// allEvents reads the whole event log (no follow).
func allEvents(t *testing.T, h *hostfork.Host) []hostfork.Event {
	t.Helper()
	var out []hostfork.Event
	for ev, err := range h.Events(ctxT(t), 0, false) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// readSome follows the event log from since and returns the next n events
// (or fewer, up to sequence upTo if that is not 0), then disconnects (ends
// the iteration).
func readSome(ctx context.Context, h *hostfork.Host, since int64, n int, upTo int64) ([]hostfork.Event, error) {
	var out []hostfork.Event
	for ev, err := range h.Events(ctx, since, true) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
		if len(out) == n || (upTo > 0 && ev.Seq >= upTo) {
			break
		}
	}
	return out, nil
}

// seqs lists the sequence numbers of events.
func seqs(evs []hostfork.Event) []int64 {
	out := make([]int64, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

// wantSameLog checks that got is exactly the log: the same events in the
// same order, none missing, none twice.
func wantSameLog(t *testing.T, got, log []hostfork.Event) {
	t.Helper()
	if !slices.Equal(seqs(got), seqs(log)) {
		t.Fatalf("resumed reads saw sequences %v, the log has %v", seqs(got), seqs(log))
	}
	for i := range got {
		if got[i].Kind != log[i].Kind || got[i].Command != log[i].Command || got[i].Env != log[i].Env {
			t.Fatalf("event %d: %+v, the log has %+v", got[i].Seq, got[i], log[i])
		}
	}
	for i := 1; i < len(log); i++ {
		if log[i].Seq <= log[i-1].Seq {
			t.Fatalf("the log is not in sequence order at %d: %v", i, seqs(log))
		}
	}
}

// kindsOf lists the kinds of the events of a command, or of an
// environment itself.
func kindsOf(evs []hostfork.Event, id string) []hostfork.EventKind {
	var out []hostfork.EventKind
	for _, ev := range evs {
		if ev.Command == id || (ev.Command == "" && ev.Env == id) {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// The event log records an environment's and its commands' lifecycles; a
// consumer that reads N events, disconnects and resumes from the last
// sequence it saw misses nothing and sees nothing twice; a follower sees
// new events as they are committed and ends with its context's error.
func TestEventsResume(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	if last, err := h.LastEvent(ctx); err != nil || last != 0 {
		t.Fatalf("a new store's last event: %d %v", last, err)
	}
	env := newEnv(t, h, spec.Environment{})
	var ids []string
	for i := 0; i < 3; i++ {
		cmd := env.Command("sh", "-c", fmt.Sprintf("exit %d", i))
		if err := cmd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := cmd.WaitTree(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cmd.ID())
	}
	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	log := allEvents(t, h)
	last, err := h.LastEvent(ctx)
	if err != nil || len(log) == 0 || last != log[len(log)-1].Seq {
		t.Fatalf("last event %d (%v), log %v", last, err, seqs(log))
	}
	envKinds := kindsOf(log, env.ID())
	for _, k := range []hostfork.EventKind{hostfork.EventEnvCreated, hostfork.EventEnvStopDecided, hostfork.EventEnvStopped} {
		if !slices.Contains(envKinds, k) {
			t.Errorf("the environment's events %v lack %s", envKinds, k)
		}
	}
	for i, id := range ids {
		k := kindsOf(log, id)
		if !slices.Equal(k, []hostfork.EventKind{hostfork.EventCommandStarted, hostfork.EventCommandLeaderExit, hostfork.EventCommandTreeExit}) {
			t.Errorf("command %d's events: %v", i, k)
		}
		for _, ev := range log {
			if ev.Command == id && ev.Kind == hostfork.EventCommandLeaderExit && (ev.ExitCode == nil || *ev.ExitCode != i || ev.Env != env.ID()) {
				t.Errorf("command %d's leader exit event: %+v", i, ev)
			}
		}
	}

	for _, n := range []int{1, 2, 5} {
		var got []hostfork.Event
		var since int64
		for since < last {
			evs, err := readSome(ctx, h, since, n, last)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, evs...)
			since = evs[len(evs)-1].Seq
		}
		wantSameLog(t, got, log)
	}
	// The same with a cancelled context instead of a break: the consumer
	// takes what it is given until the iteration ends with the context's
	// error, and resumes after the last event it got.
	for _, n := range []int{1, 4} {
		var got []hostfork.Event
		var since int64
		for since < last {
			cctx, cancel := context.WithCancel(ctx)
			k := 0
			for ev, err := range h.Events(cctx, since, true) {
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Fatal(err)
					}
					break
				}
				got = append(got, ev)
				since = ev.Seq
				if k++; k == n || since == last {
					cancel()
				}
			}
			cancel()
		}
		wantSameLog(t, got, log)
	}

	// A follower sees what is committed after it started, then ends with
	// its context's error.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var followed []hostfork.Event
	var endErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range h.Events(fctx, last, true) {
			if err != nil {
				endErr = err
				return
			}
			mu.Lock()
			followed = append(followed, ev)
			mu.Unlock()
		}
	}()
	env2 := newEnv(t, h, spec.Environment{})
	cmd := env2.Command("true")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		k := kindsOf(followed, cmd.ID())
		mu.Unlock()
		if slices.Contains(k, hostfork.EventCommandTreeExit) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower saw %v for the new command", k)
		}
	}
	cancel()
	<-done
	if !errors.Is(endErr, context.Canceled) {
		t.Errorf("the follower ended with %v, want context.Canceled", endErr)
	}
	if followed[0].Seq != last+1 || kindsOf(followed, env2.ID())[0] != hostfork.EventEnvCreated {
		t.Errorf("the follower's first event: %+v", followed[0])
	}
	wantSameLog(t, followed, allEvents(t, h)[len(log):len(log)+len(followed)])

	// Closing the Host ends a follower with ErrClosed.
	h2, err := hostfork.Open(ctx, hostfork.Options{Root: h.Root(), CgroupParent: h.Capabilities().CgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	closedErr := make(chan error, 1)
	go func() {
		for _, err := range h2.Events(ctx, 1<<40, true) {
			closedErr <- err
			return
		}
		closedErr <- nil
	}()
	time.Sleep(20 * time.Millisecond) // let it block (not needed for correctness)
	h2.Close()
	if err := <-closedErr; !errors.Is(err, hostfork.ErrClosed) {
		t.Errorf("a follower of a closed Host ended with %v, want ErrClosed", err)
	}
}

// A writer process (an orchestrator running command after command) is
// SIGKILLed mid-stream while a consumer follows the log, disconnecting
// every few events and resuming from the last sequence it saw: the
// consumer misses nothing and sees nothing twice, before the crash, across
// it, and in what the reaper records after it; every command the writer
// saw finish has its tree-exit event.
func TestEventsResumeAcrossWriterCrash(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root := t.TempDir()
	t.Cleanup(func() { cleanStore(t, root, parent) })
	ctx := ctxT(t)
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var got []hostfork.Event
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Read 3 events, disconnect, resume from the last one seen.
		var since int64
		for {
			n := 0
			for ev, err := range h.Events(cctx, since, true) {
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						readErr = err
					}
					return
				}
				mu.Lock()
				got = append(got, ev)
				mu.Unlock()
				since = ev.Seq
				if n++; n == 3 {
					break
				}
			}
		}
	}()

	// The writer: owner-exit stop (the default), so its environment and
	// the command in flight end when it is killed.
	c := startOrchestrator(t, orchestration{Root: root, CgroupParent: parent,
		Spec:     spec.Environment{Purpose: "event writer"},
		Commands: [][]string{{"sleep", "0.5"}, {"sh", "-c", "echo x"}}, Loop: true})
	envID := c.next(t, "env")
	var finished []string
	for len(finished) < 8 {
		c.next(t, "cmd")
		finished = append(finished, c.next(t, "done"))
	}
	// Kill it while a command runs.
	inFlight := c.next(t, "cmd")
	c.kill()

	// The reaper finishes what the writer left: the environment's stop.
	if _, err := h.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	waitEnvState(t, h, envID, hostfork.EnvStopped)
	// Reaping is idempotent: a second pass has nothing to do.
	if rep, err := h.Reap(ctx); err != nil || len(rep.Actions) > 0 {
		t.Errorf("a second reap: %v %+v", err, rep)
	}
	last, err := h.LastEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		reached := n > 0 && got[n-1].Seq >= last
		mu.Unlock()
		if reached {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer read %d events, up to %v; the log ends at %d", n, seqs(got[max(n-1, 0):]), last)
		}
	}
	cancel()
	<-done
	if readErr != nil {
		t.Fatal(readErr)
	}
	log := allEvents(t, h)
	wantSameLog(t, got, log[:len(got)])
	if got[len(got)-1].Seq != last {
		t.Fatalf("the consumer read past the log's end: %v", seqs(got))
	}
	for _, id := range finished {
		if !slices.Contains(kindsOf(log, id), hostfork.EventCommandTreeExit) {
			t.Errorf("command %s finished before the crash but has events %v", id, kindsOf(log, id))
		}
	}
	// The command in flight was stopped (owner exit) or finished; either
	// way its tree's end is in the log, and its record is final.
	if k := kindsOf(log, inFlight); !slices.Contains(k, hostfork.EventCommandTreeExit) {
		t.Errorf("the command in flight at the crash has events %v", k)
	}
	if _, rec, err := h.Status(ctx, inFlight); err != nil || !rec.Final() {
		t.Errorf("the command in flight at the crash: %v %+v", err, rec)
	}
	var kinds []string
	for _, k := range kindsOf(log, envID) {
		kinds = append(kinds, string(k))
	}
	if !slices.Contains(kinds, string(hostfork.EventEnvStopped)) {
		t.Errorf("the writer's environment has events %s", strings.Join(kinds, " "))
	}
	t.Logf("%d events; the environment's: %s", len(log), strings.Join(kinds, " "))
}
