package hostfork_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// The examples run as root on Linux (in this package's tests, under a
// cgroup parent that TestMain provides through $HOSTFORK_CGROUP_PARENT).
// Each makes its own store in a temporary directory; a real program would
// use hostfork.Options{} (the default store).

// printEvent prints an event's sequence, kind and reason.
func printEvent(ev hostfork.Event) {
	if ev.Reason != "" {
		fmt.Println(ev.Seq, ev.Kind, ev.Reason)
		return
	}
	fmt.Println(ev.Seq, ev.Kind)
}

// tempStore returns a new store directory and its removal.
func tempStore() (string, func()) {
	dir, err := os.MkdirTemp("", "hostfork-example-")
	if err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dir, "store"), func() { os.RemoveAll(dir) }
}

// A one-shot run, like `hostfork run -- sh -c ...`: Run creates the
// environment with its first command, and stops the environment once that
// command's whole tree has exited.
func ExampleHost_Run() {
	ctx := context.Background()
	root, remove := tempStore()
	defer remove()

	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	plan, err := h.Plan(ctx, spec.Environment{Purpose: "example: one-shot"})
	if err != nil {
		log.Fatal(err)
	}
	cmd := h.Command("sh", "-c", "echo hello from $0; exit 3", "the workload")
	env, err := h.Run(ctx, plan, cmd)
	if err != nil {
		log.Fatal(err)
	}
	rec, err := cmd.WaitTree(ctx) // every descendant is gone, and recorded
	if err != nil {
		log.Fatal(err)
	}
	out, err := os.ReadFile(rec.StdoutPath) // output is kept in files
	if err != nil {
		log.Fatal(err)
	}
	status, _ := hostfork.ExitStatus(rec)
	fmt.Print(string(out))
	fmt.Println("exit status:", status)
	fmt.Println("tree:", rec.TreeState)
	e, err := env.Refresh(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("environment:", e.State)
	// Output:
	// hello from the workload
	// exit status: 3
	// tree: exited
	// environment: stopped
}

// An environment with a private tree: the workload sees an overlay of a
// host directory at that directory's path, and its writes stay in the
// environment. Several commands run in it, one after the other, and see
// each other's changes; the host's directory is unchanged.
func ExampleHost_Create() {
	ctx := context.Background()
	root, remove := tempStore()
	defer remove()
	project := filepath.Join(filepath.Dir(root), "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "VERSION"), []byte("v1\n"), 0o644); err != nil {
		log.Fatal(err)
	}

	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	plan, err := h.Plan(ctx, spec.Environment{
		Purpose: "example: a session",
		Labels:  map[string]string{"example": "create"},
		Trees:   map[string]spec.Tree{"project": {Kind: spec.KindOverlay, Source: project}},
		View:    spec.View{Replace: map[string]string{project: "project"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	env, err := h.Create(ctx, plan)
	if err != nil {
		log.Fatal(err)
	}
	for _, script := range []string{"cat VERSION", "echo v2 > VERSION", "cat VERSION"} {
		cmd := env.Command("sh", "-c", script)
		cmd.Cwd = project
		res, err := cmd.Capture(ctx) // pipe mode; the output comes back too
		if err != nil {
			log.Fatal(err)
		}
		text, err := res.Text() // refuses an incomplete capture
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-18s -> %q\n", script, text)
	}
	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		log.Fatal(err)
	}
	onHost, _ := os.ReadFile(filepath.Join(project, "VERSION"))
	inUpper, _ := os.ReadFile(filepath.Join(env.Record().Trees[0].HostPath, "VERSION"))
	fmt.Printf("on the host: %q; the tree keeps %q\n", onHost, inUpper)
	fmt.Println("the workload's path for the tree:", env.Paths()["project"] == project)
	rec, err := env.Refresh(ctx) // the record with its commands
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("environment:", rec.State, "commands:", len(rec.Commands))
	// Output:
	// cat VERSION        -> "v1\n"
	// echo v2 > VERSION  -> ""
	// cat VERSION        -> "v2\n"
	// on the host: "v1\n"; the tree keeps "v2\n"
	// the workload's path for the tree: true
	// environment: stopped commands: 3
}

// Reopening after a restart: an orchestrator starts a command and goes
// away (here: closes its Host); a new one finds the command by id, waits
// for it and reads its output, and stops the environment.
func ExampleHost_OpenCommand() {
	ctx := context.Background()
	root, remove := tempStore()
	defer remove()

	// The first orchestrator.
	first, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	plan, err := first.Plan(ctx, spec.Environment{
		Purpose: "example: reopen",
		// Outlive the process that creates it, bounded by a deadline.
		Lifetime: spec.Lifetime{OwnerExit: spec.OwnerExitDetach, MaxRuntime: spec.Duration(10 * time.Minute)},
	})
	if err != nil {
		log.Fatal(err)
	}
	env, err := first.Create(ctx, plan)
	if err != nil {
		log.Fatal(err)
	}
	cmd := env.Command("sh", "-c", "sleep 0.2; echo finished; exit 4")
	cmd.Labels = map[string]string{"task": "t-42"}
	if err := cmd.Start(ctx); err != nil {
		log.Fatal(err)
	}
	first.Close() // a restart: the command keeps running

	// The second orchestrator.
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	found, err := h.Commands(ctx, hostfork.CommandFilter{Labels: hostfork.Selector{"task=t-42"}})
	if err != nil || len(found) != 1 {
		log.Fatal(err, found)
	}
	again, err := h.OpenCommand(ctx, found[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	logs, err := again.Logs(ctx, hostfork.LogOptions{Follow: true}) // until the tree exits
	if err != nil {
		log.Fatal(err)
	}
	out, _ := io.ReadAll(logs)
	logs.Close()
	rec, err := again.WaitTree(ctx)
	if err != nil {
		log.Fatal(err)
	}
	status, _ := hostfork.ExitStatus(rec)
	fmt.Printf("output %q, exit status %d, %s\n", out, status, rec.Liveness)
	stopped, err := h.StopEnv(ctx, rec.Env, hostfork.StopOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("environment:", stopped.State)
	// Output:
	// output "finished\n", exit status 4, exited
	// environment: stopped
}

// Following the event log. A consumer remembers the last sequence it saw
// and, after a reconnect (or its own restart), resumes from it: it misses
// nothing and sees nothing twice.
func ExampleHost_Events() {
	ctx := context.Background()
	root, remove := tempStore()
	defer remove()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	// A follower, from the start of the log, until the environment stops.
	var last int64
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		for ev, err := range h.Events(ctx, 0, true) {
			if err != nil {
				log.Fatal(err)
			}
			printEvent(ev)
			last = ev.Seq
			if ev.Kind == hostfork.EventCommandLeaderExit {
				return // disconnect
			}
		}
	}()

	plan, err := h.Plan(ctx, spec.Environment{Purpose: "example: events"})
	if err != nil {
		log.Fatal(err)
	}
	env, err := h.Create(ctx, plan)
	if err != nil {
		log.Fatal(err)
	}
	cmd := env.Command("true")
	if err := cmd.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := cmd.WaitTree(ctx); err != nil {
		log.Fatal(err)
	}
	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		log.Fatal(err)
	}
	<-followed

	// Reconnect: everything after the last sequence seen, and no more.
	fmt.Println("resuming after", last)
	for ev, err := range h.Events(ctx, last, false) {
		if err != nil {
			log.Fatal(err)
		}
		printEvent(ev)
	}
	n, _ := h.LastEvent(ctx)
	fmt.Println(strings.Repeat("-", 3), "last event:", n)
	// Output:
	// 1 env.created
	// 2 command.started
	// 3 command.leader_exited
	// resuming after 3
	// 4 command.tree_exited
	// 5 env.stop_decided user
	// 6 env.stopped user
	// --- last event: 6
}

// Waiting for a dev server: start it in the background, wait until it
// prints that it listens (the line and its byte offset), then until it has
// been quiet for a moment, read its last line, and stop it.
func ExampleCommand_WaitFor() {
	ctx := context.Background()
	root, remove := tempStore()
	defer remove()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	plan, err := h.Plan(ctx, spec.Environment{Purpose: "example: dev server",
		Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(10 * time.Minute)}})
	if err != nil {
		log.Fatal(err)
	}
	env, err := h.Create(ctx, plan)
	if err != nil {
		log.Fatal(err)
	}
	server := env.Command("sh", "-c", `echo starting; sleep 0.5; echo "listening on :8080"; exec sleep 60`)
	if err := server.Start(ctx); err != nil {
		log.Fatal(err)
	}
	m, err := server.WaitFor(ctx, regexp.MustCompile(`listening on :(\d+)`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s at byte %d: %q\n", m.Stream, m.Offset, m.Line)
	if _, err := server.WaitStalled(ctx, 100*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	last, err := server.Logs(ctx, hostfork.LogOptions{Tail: 1})
	if err != nil {
		log.Fatal(err)
	}
	line, _ := io.ReadAll(last)
	last.Close()
	fmt.Printf("last line: %q\n", line)
	if _, err := h.StopEnv(ctx, env.ID(), hostfork.StopOptions{}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// stdout at byte 9: "listening on :8080"
	// last line: "listening on :8080\n"
}
