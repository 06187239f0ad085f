package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/client"
)

// clientRun is an ab command that runs in this process through the public
// Go client of a warm server ('hostfork serve') instead of as a child
// process: the COMMAND "@run SOCKET ARGV..." is one POST /v1/runs (a fresh
// environment with ARGV as its first command; the server stops the
// environment when the command's tree has exited, as 'hostfork run' does)
// and a wait for the command's tree. With -par N the N instances share one
// Client, as one program's goroutines would. Its samples have no CPU time:
// the server and the guardians are not this process's children.
type clientRun struct {
	c    *client.Client
	argv []string
}

// newClientRun parses "@run SOCKET ARGV..." (its words after "@run").
func newClientRun(w []string) (*clientRun, error) {
	if len(w) < 2 {
		return nil, fmt.Errorf("@run: want @run SOCKET ARGV...")
	}
	c, err := client.New(w[0])
	if err != nil {
		return nil, err
	}
	return &clientRun{c: c, argv: w[1:]}, nil
}

// one runs ARGV in its own environment and waits for its tree; the
// command must exit 0.
func (r *clientRun) one() (sample, error) {
	var s sample
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	env, err := r.c.Run(ctx, client.RunRequest{
		Env:     map[string]any{"lifetime": map[string]any{"max_runtime": "10m"}},
		Command: client.CommandRequest{Argv: r.argv},
	})
	if err != nil {
		return s, fmt.Errorf("@run %s: %w", strings.Join(r.argv, " "), err)
	}
	if len(env.Commands) == 0 {
		return s, fmt.Errorf("@run: environment %s came without its command", env.ID)
	}
	rec, err := r.c.Wait(ctx, env.Commands[0].ID, client.WaitTree)
	if err != nil {
		return s, fmt.Errorf("@run: waiting for %s: %w", env.Commands[0].ID, err)
	}
	if code, ok := rec.ExitStatus(); !ok || code != 0 {
		return s, fmt.Errorf("@run: command %s ended with exit code %d (known: %v), tree %s", rec.ID, code, ok, rec.TreeState)
	}
	s.StepsMS = []float64{ms(time.Since(t0))}
	return s, nil
}
