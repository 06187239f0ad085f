// Package hostfork is the hostfork library: run commands on a shared Linux
// host in environments that own their whole process trees, with durable
// records that survive the caller.
//
// The workflow (DESIGN.md, "Interfaces"): Open a store, Plan an
// environment from a spec.Environment, Create it, then start commands in
// it with Env.Command, much like os/exec:
//
//	h, err := hostfork.Open(ctx, hostfork.Options{})
//	plan, err := h.Plan(ctx, spec.Environment{})
//	env, err := h.Create(ctx, plan)
//	cmd := env.Command("make", "test")
//	err = cmd.Start(ctx)
//	rec, err := cmd.Wait(ctx)      // the leader process exited
//	rec, err = cmd.WaitTree(ctx)   // every descendant is gone, and recorded
//	err = env.Stop(ctx, hostfork.StopOptions{})
//
// Host.Run does Create, Start and the environment's stop in one: the
// environment ends when the command's tree does (what `hostfork run` does,
// in three commits, two of them synced to disk).
//
// Where it differs from os/exec: Wait returns when the leader exits, not
// when its descendants do (WaitTree does); output goes to owned files by
// default; a command keeps running (or is stopped, by policy) when the
// calling process dies; every record is durable and can be reopened by
// another process (Host.OpenCommand, Host.Commands, Command.Logs,
// Host.Events). Cancelling the context a command was started with stops
// its whole tree, as exec.CommandContext kills its process. Every blocking
// call takes a context.
//
// Any program that imports this package can run commands: the guardian and
// the keeper, hostfork's small helper processes, are C code compiled into
// the importing binary and run by an ELF constructor before the Go runtime
// starts when the binary is re-executed as one of them. Nothing needs to be
// dispatched in main.
//
// The types of records, events, filters and reports are defined in package
// api (so a client of `hostfork serve` can use them without linking the
// engine) and re-exported here under the names used below. Errors are the
// sentinels of package api, re-exported as Err*; test with errors.Is.
//
// The CLI (cmd/hostfork) and the HTTP API are layers over this package;
// this package never imports cobra or net/http.
package hostfork
