package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// TestMeasure prints the figures of docs/benchmarks.md ("Temporal"): a
// one-command workflow against hostfork's own run of the same command on
// one node (library and command line, side by side, medians), and the time
// from a worker's loss to the workflow resuming on another node. It runs
// only with HOSTFORK_TEMPORAL_MEASURE=1; HOSTFORK_BIN names a hostfork
// binary for the command-line comparison.
func TestMeasure(t *testing.T) {
	if os.Getenv("HOSTFORK_TEMPORAL_MEASURE") != "1" {
		t.Skip("a measurement, not a test: set HOSTFORK_TEMPORAL_MEASURE=1 (and HOSTFORK_BIN=path/to/hostfork)")
	}
	c := newCluster(t)
	a := c.node("a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const n = 31

	// The same node's store, used in this process through the library.
	h := a.h
	lib := measure(n, func() error {
		plan, err := h.Plan(ctx, spec.Environment{})
		if err != nil {
			return err
		}
		cmd := h.Command("true")
		if _, err := h.Run(ctx, plan, cmd); err != nil {
			return err
		}
		_, err = cmd.WaitTree(ctx)
		return err
	})
	i := 0
	wf := measure(n, func() error {
		i++
		res, err := result(t, ctx, c, c.submit(ctx, fmt.Sprintf("measure-%d", i), flow.Request{Commands: []flow.Command{{Argv: []string{"true"}}}}))
		if err == nil && res.ExitStatus != 0 {
			err = fmt.Errorf("exit status %d", res.ExitStatus)
		}
		return err
	})
	t.Logf("library, one node:  Host.Run+WaitTree of true: median %v, p90 %v", lib.median(), lib.p90())
	t.Logf("library, one node:  RunInEnvironment(true):    median %v, p90 %v (overhead %v)", wf.median(), wf.p90(), wf.median()-lib.median())

	exe, _ := os.Executable()
	submit := measure(n, func() error {
		cmd := exec.CommandContext(ctx, exe, "submit", "--address", c.srv.Address(), "--", "true")
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		return cmd.Run()
	})
	if bin := os.Getenv("HOSTFORK_BIN"); bin != "" {
		root := filepath.Join(c.dir, "store-cli")
		run := measure(n, func() error {
			cmd := exec.CommandContext(ctx, bin, "--root", root, "run", "--", "true")
			cmd.Env = append(os.Environ(), "HOSTFORK_CGROUP_PARENT="+a.cgroup)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		t.Logf("command line:       hostfork run -- true:      median %v, p90 %v", run.median(), run.p90())
		t.Logf("command line:       hostfork-temporal submit -- true: median %v, p90 %v (overhead %v)", submit.median(), submit.p90(), submit.median()-run.median())
	} else {
		t.Logf("command line:       hostfork-temporal submit -- true: median %v, p90 %v (set HOSTFORK_BIN for hostfork run)", submit.median(), submit.p90())
	}

	// Worker loss to resumption, with the default heartbeat timeout and
	// node pickup, and with shorter ones.
	b := c.node("b")
	for _, o := range []flow.Options{
		{},
		{HeartbeatTimeout: api.Duration(5 * time.Second), NodePickup: api.Duration(5 * time.Second)},
		{HeartbeatTimeout: api.Duration(2 * time.Second), NodePickup: api.Duration(2 * time.Second)},
	} {
		var resumed, done []time.Duration
		for k := range 3 {
			id := fmt.Sprintf("loss-%v-%d", o.HeartbeatTimeout, k)
			if err := b.h.SetPaused(ctx, true); err != nil {
				t.Fatal(err)
			}
			run := c.submit(ctx, id, flow.Request{Commands: []flow.Command{sh("sleep 2")}, Options: o})
			if nd, _, _ := c.liveCommand(ctx, id, 1); nd != a {
				t.Fatalf("%s started on %s", id, nd.name)
			}
			if err := b.h.SetPaused(ctx, false); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			a.kill(t)
			created := waitEnv(t, ctx, b, id)
			if _, err := result(t, ctx, c, run); err != nil {
				t.Fatal(err)
			}
			resumed = append(resumed, created.Sub(killed))
			done = append(done, time.Since(killed))
			c.start(a)
		}
		ho := o
		ho.HeartbeatTimeout, ho.NodePickup = api.Duration(flow.DefaultHeartbeatTimeout), api.Duration(flow.DefaultNodePickup)
		if o.HeartbeatTimeout != 0 {
			ho = o
		}
		t.Logf("worker loss (heartbeat timeout %v, node pickup %v): new environment on b after %v, workflow done after %v (sleep 2 included)",
			ho.HeartbeatTimeout, ho.NodePickup, resumed, done)
	}
}

type samples []time.Duration

func measure(n int, f func() error) samples {
	var s samples
	for range n {
		began := time.Now()
		if err := f(); err != nil {
			panic(err)
		}
		s = append(s, time.Since(began))
	}
	slices.Sort(s)
	return s
}

func (s samples) median() time.Duration { return s[len(s)/2].Round(10 * time.Microsecond) }
func (s samples) p90() time.Duration    { return s[len(s)*9/10].Round(10 * time.Microsecond) }
