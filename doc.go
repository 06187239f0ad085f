// Package hostfork is the hostfork library: run commands on a shared Linux
// host in environments that own their whole process trees, with durable
// records that survive the caller.
//
// The workflow mirrors DESIGN.md: Open a store, Plan an environment from a
// spec.Environment, Create it, then start commands in it with Env.Command,
// much like os/exec:
//
//	h, _ := hostfork.Open(ctx, hostfork.Options{})
//	plan, _ := h.Plan(ctx, spec.Environment{})
//	env, _ := h.Create(ctx, plan)
//	cmd := env.Command("make", "test")
//	_ = cmd.Start(ctx)
//	res, _ := cmd.Wait(ctx)     // the leader process exited
//	tree, _ := cmd.WaitTree(ctx) // every descendant is gone
//	_ = env.Stop(ctx, hostfork.StopOptions{})
//
// Where it differs from os/exec: Wait returns when the leader exits, not
// when its descendants do (WaitTree does); output goes to owned files by
// default; and a command keeps running (or is stopped, by policy) when the
// calling process dies. Every blocking call takes a context.
//
// The CLI (internal/cli) is a thin layer over this package. This package
// never imports cobra or net/http.
package hostfork
