package hostfork_test

import (
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// The idle timeout fires for a silent process and not for one that keeps
// printing, in files and pipe modes; the record says why it stopped.
func TestIdleTimeout(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{IdleTimeout: spec.Duration(time.Second), Grace: spec.Duration(500 * time.Millisecond)}})

	silent := env.Command("sleep", "60")
	if err := silent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := silent.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != hostfork.ReasonIdle || res.Signal == nil {
		t.Fatalf("silent process: stop reason %q signal %v exit %v", res.StopReason, res.Signal, res.ExitCode)
	}

	for _, mode := range []hostfork.OutputMode{hostfork.OutputFiles, hostfork.OutputPipe} {
		talker := env.Command("sh", "-c", "for i in 1 2 3 4 5 6; do echo tick; sleep 0.4; done")
		talker.Output = mode
		if err := talker.Start(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := talker.WaitTree(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != "" || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Fatalf("%s: a process that prints was stopped: reason %q exit %v signal %v", mode, res.StopReason, res.ExitCode, res.Signal)
		}
	}
}
