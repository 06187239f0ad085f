package hostfork_test

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A server started by another process prints "listening on" after 2 s;
// this process reopens it by id and waits for the line (WaitFor), for its
// output to stall (WaitStalled), reads its last lines (Tail), and bounds a
// wait that can't succeed with its context; after the stop, a wait for a
// pattern that never came ends with ErrCommandFinished, not a hang.
func TestWaitForOtherProcess(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root := t.TempDir()
	t.Cleanup(func() { cleanStore(t, root, parent) })
	script := `echo starting; echo warming up >&2; sleep 2; printf 'listening on 127.0.0.1:8000\nready\n'; exec sleep 300`
	c := startOrchestrator(t, orchestration{Root: root, CgroupParent: parent, Spec: detachedSpec,
		Commands: [][]string{{"sh", "-c", script}}, OwnerExit: "detach"})
	c.next(t, "env")
	cmdID := c.next(t, "cmd")
	c.kill()

	ctx := ctxT(t)
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cmd, err := h.OpenCommand(ctx, cmdID)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.StopTree(context.Background(), hostfork.StopOptions{})

	m, err := cmd.WaitFor(ctx, regexp.MustCompile(`listening on (\S+)`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Stream != "stdout" || m.Line != "listening on 127.0.0.1:8000" || m.Text != m.Line || m.Offset != int64(len("starting\n")) || m.LineOffset != m.Offset || m.Next != m.Offset+int64(len(m.Line))+1 {
		t.Fatalf("match %+v", m)
	}
	// The offset addresses the artifact's bytes.
	rd, err := cmd.Logs(ctx, hostfork.LogOptions{Offset: m.Offset})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rd)
	rd.Close()
	if !strings.HasPrefix(string(b), "listening on") {
		t.Fatalf("at offset %d: %q", m.Offset, b)
	}
	// Since: the search goes on after the match.
	out, err := cmd.WaitUntil(ctx, hostfork.WaitOptions{For: regexp.MustCompile(`^\w+$`), Stream: "stdout", Since: m.Next})
	if err != nil || out.Reason != hostfork.OutcomeMatch || out.Match.Line != "ready" || out.Command.ID != cmdID {
		t.Fatalf("since %d: %+v %v", m.Next, out, err)
	}
	// stderr is searched too.
	if m, err := cmd.WaitFor(ctx, regexp.MustCompile(`warming`)); err != nil || m.Stream != "stderr" || m.Offset != 0 {
		t.Fatalf("stderr match %+v %v", m, err)
	}

	quiet, err := cmd.WaitStalled(ctx, 300*time.Millisecond)
	if err != nil || time.Since(quiet) < 300*time.Millisecond {
		t.Fatalf("stalled: %v %v", quiet, err)
	}
	if off, err := cmd.TailOffset(ctx, "stdout", 2); err != nil || off != m.Offset {
		t.Fatalf("tail offset %d %v, want %d", off, err, m.Offset)
	}
	rd, err = cmd.Logs(ctx, hostfork.LogOptions{Tail: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rd); string(b) != "ready\n" {
		t.Fatalf("tail 1: %q", b)
	}
	rd.Close()

	// A bound of the caller's: the context's deadline.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cmd.WaitFor(short, regexp.MustCompile(`never printed`))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bounded wait: %v", err)
	}
	// Bad options name the fix.
	if _, err := cmd.WaitUntil(ctx, hostfork.WaitOptions{For: regexp.MustCompile("x"), Since: 3}); !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "since needs a stream") {
		t.Fatalf("since without a stream: %v", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := cmd.WaitFor(ctx, regexp.MustCompile(`never printed`))
		done <- err
	}()
	if _, err := cmd.StopTree(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, hostfork.ErrCommandFinished) {
			t.Fatalf("wait across the stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitFor did not return within 30s of the tree's end")
	}
	if _, err := cmd.WaitStalled(ctx, time.Hour); !errors.Is(err, hostfork.ErrCommandFinished) {
		t.Fatalf("stalled after the end: %v", err)
	}
}
