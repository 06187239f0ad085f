// Command extmod is a program in its own module that uses the hostfork
// library as any outside orchestrator would: it sets no Options.Exe and
// dispatches nothing in main, creates an environment with an overlay tree
// and a view, runs several commands in it, and stops it. The hostfork
// repository builds and runs it in a test (extmod_test.go).
//
// Usage: extmod -root STORE -lower DIR -target DIR [-mainlog FILE]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// summary is what the program reports on its last line, as JSON; its
// fields are the library's own exported types.
type summary struct {
	Env      string                   `json:"env"`
	State    hostfork.EnvState        `json:"state"`
	Reason   hostfork.StopReason      `json:"stop_reason"`
	Commands []hostfork.CommandRecord `json:"commands"`
	Tree     hostfork.Tree            `json:"tree"`
}

func main() {
	root := flag.String("root", "", "store directory")
	lower := flag.String("lower", "", "the overlay tree's lower directory")
	target := flag.String("target", "", "the path the tree replaces in the view")
	mainlog := flag.String("mainlog", "", "a file main appends its PID to, each time it runs")
	flag.Parse()
	if *mainlog != "" {
		f, err := os.OpenFile(*mainlog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			fmt.Fprintf(f, "main %d %q\n", os.Getpid(), os.Args)
			f.Close()
		}
	}
	if err := run(*root, *lower, *target); err != nil {
		fmt.Fprintln(os.Stderr, "extmod:", err)
		os.Exit(1)
	}
}

func run(root, lower, target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		return err
	}
	defer h.Close()
	plan, err := h.Plan(ctx, spec.Environment{
		Purpose: "extmod",
		Labels:  map[string]string{"from": "extmod"},
		Trees:   map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:    spec.View{Replace: map[string]string{target: "proj"}},
	})
	if err != nil {
		return err
	}
	if len(plan.Unsupported) > 0 {
		return fmt.Errorf("unsupported here: %q", plan.Unsupported)
	}
	env, err := h.Create(ctx, plan)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	var recs []hostfork.CommandRecord
	step := func(c *hostfork.Command) (hostfork.CommandRecord, error) {
		c.Cwd = target
		if err := c.Start(ctx); err != nil {
			return hostfork.CommandRecord{}, err
		}
		rec, err := c.WaitTree(ctx)
		if err != nil {
			return rec, err
		}
		if st, ok := hostfork.ExitStatus(rec); !ok || st != 0 {
			return rec, fmt.Errorf("%q exited %d (%v)", rec.Argv, st, ok)
		}
		recs = append(recs, rec)
		return rec, nil
	}
	// 1: write into the tree; 2: read it back in a new command.
	if _, err := step(env.Command("sh", "-c", "cat base.txt; echo from-extmod > new.txt")); err != nil {
		return err
	}
	rec, err := step(env.Command("cat", "new.txt"))
	if err != nil {
		return err
	}
	out, err := os.ReadFile(rec.StdoutPath)
	if err != nil {
		return err
	}
	fmt.Printf("read back: %s", out)
	// 3: output streamed back (pipe mode, captured).
	c := env.Command("sh", "-c", "ls; grep -c ' "+target+" ' /proc/self/mountinfo")
	c.Cwd = target
	res, err := c.Capture(ctx)
	if err != nil {
		return err
	}
	text, err := res.Text()
	if err != nil {
		return err
	}
	fmt.Printf("captured: %s\n", strings.Join(strings.Fields(text), " "))
	if _, err := c.WaitTree(ctx); err != nil {
		return err
	}
	recs = append(recs, c.Record())
	// 4: a command stopped by its own timeout.
	slow := env.Command("sleep", "300")
	slow.Timeout = 200 * time.Millisecond
	if err := slow.Start(ctx); err != nil {
		return err
	}
	srec, err := slow.WaitTree(ctx)
	if err != nil {
		return err
	}
	if srec.StopReason != hostfork.ReasonTimeout {
		return fmt.Errorf("the slow command's stop reason is %q", srec.StopReason)
	}
	fmt.Printf("timed out: %s\n", srec.StopReason)
	recs = append(recs, srec)

	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	final := env.Record()
	if final.State != hostfork.EnvStopped {
		return fmt.Errorf("after stop the environment is %s", final.State)
	}
	if err := env.Command("true").Start(ctx); !errors.Is(err, hostfork.ErrEnvNotActive) {
		return fmt.Errorf("a command after stop: %v", err)
	}
	b, err := json.Marshal(summary{Env: env.ID(), State: final.State, Reason: final.StopReason, Commands: recs, Tree: final.Trees[0]})
	if err != nil {
		return err
	}
	fmt.Printf("summary %s\n", b)
	return nil
}
