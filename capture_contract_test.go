package hostfork_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// The output-parsing helpers of a capture (Text, JSON) refuse an
// incomplete capture, whether the buffer limit was passed or a descendant
// still held the stream when the final drain ended; a complete capture
// parses (DESIGN.md, Capture).
func TestCaptureHelpersRefuseIncomplete(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})

	complete, err := env.Command("sh", "-c", `echo '{"a": 1}'`).Capture(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ A int }
	if err := complete.JSON(&v); err != nil || v.A != 1 || !complete.Complete() {
		t.Fatalf("complete capture: JSON %v, value %+v, states %s/%s", err, v, complete.Stdout.State, complete.Stderr.State)
	}

	for _, tc := range []struct {
		name  string
		argv  []string
		limit int
	}{
		// 4 KiB of JSON through a 1 KiB buffer.
		{"over the limit", []string{"sh", "-c", `printf '"%04096d"\n' 0`}, 1024},
		// Valid JSON at once, but a descendant keeps stdout open.
		{"descendant holds stdout", []string{"sh", "-c", `echo '{"a": 1}'; sleep 300 &`}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := env.Command(tc.argv...)
			cmd.CaptureLimit = tc.limit
			t0 := time.Now()
			res, err := cmd.Capture(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(t0); took > 30*time.Second { // a safety bound: the descendant sleeps 300s
				t.Errorf("the result took %v", took)
			}
			if res.Stdout.State != hostfork.CaptureIncomplete || res.Complete() {
				t.Fatalf("stdout state %s (%s), want incomplete", res.Stdout.State, res.Stdout.Error)
			}
			if _, err := res.Text(); !errors.Is(err, hostfork.ErrIncompleteCapture) {
				t.Errorf("Text of an incomplete capture: %v, want ErrIncompleteCapture", err)
			}
			var x any
			if err := res.JSON(&x); !errors.Is(err, hostfork.ErrIncompleteCapture) {
				t.Errorf("JSON of an incomplete capture: %v, want ErrIncompleteCapture", err)
			}
			if res.Receipt == "" {
				t.Fatalf("no capture receipt for an incomplete capture")
			}
			if b, err := os.ReadFile(res.Receipt); err != nil || !strings.Contains(string(b), res.Record.ID) {
				t.Errorf("capture receipt %s: %v %q", res.Receipt, err, b)
			}
			if r := cmd.Record(); r.Capture["stdout"].State != hostfork.CaptureIncomplete {
				t.Errorf("the record's stdout capture state is %+v", r.Capture["stdout"])
			}
			if _, err := cmd.StopTree(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Capture returns the final record when the tree ends with its leader, the
// same one the registry keeps: an OOM kill is known there, not "unknown"
// (issue 39, library).
func TestCaptureReturnsFinalRecord(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Limits: spec.Limits{Memory: 64 << 20}})
	res, err := env.Command("sh", "-c", "head -c 300M /dev/zero | tail -c 300M > /dev/null").Capture(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := h.OpenCommand(ctx, res.Record.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := other.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Record.Final() || !stored.Final() {
		t.Fatalf("capture record %s, stored %s: want both final", res.Record.State, stored.State)
	}
	if stored.OOM == nil || !*stored.OOM {
		t.Fatalf("the stored record: oom %v (%s); the test needs the OOM kill seen", stored.OOM, stored.OOMEvidence)
	}
	if res.Record.OOM == nil || *res.Record.OOM != *stored.OOM || res.Record.TreeState != stored.TreeState {
		t.Errorf("Capture's record: oom %v, tree %s; the stored record: oom %v, tree %s", res.Record.OOM, res.Record.TreeState, *stored.OOM, stored.TreeState)
	}
}
