package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/client"
)

type globals struct {
	root string
	host string
	out  io.Writer
	err  io.Writer
	args []string // this call's arguments, for the companion
	// showEnv: this verb shows explicit environment values (--show-env);
	// only then does a remote backend ask the server for them.
	showEnv bool
}

func (g *globals) open(ctx context.Context) (*hostfork.Host, error) {
	return hostfork.Open(ctx, hostfork.Options{Root: g.root})
}

// server is the server the verbs run through: --host, else
// $HOSTFORK_HOST; "" runs them in this process.
func (g *globals) server() string {
	if g.host != "" {
		return g.host
	}
	return os.Getenv(client.HostEnv)
}

func (g *globals) remote() bool { return g.server() != "" }

// backend opens the store in this process, or a client of the server.
func (g *globals) backend(ctx context.Context) (backend, error) {
	if u := g.server(); u != "" {
		c, err := client.New(u)
		if err != nil {
			return nil, withCode(ExitUsage, fmt.Errorf("--host: %w", err))
		}
		return &remote{Client: c, err: g.err, showEnv: g.showEnv}, nil
	}
	h, err := g.open(ctx)
	if err != nil {
		return nil, err
	}
	return local{h}, nil
}

// withBackend wraps a verb that needs the store: it opens it (or a client
// of the server), runs fn, and closes it.
func (g *globals) withBackend(fn func(c *cobra.Command, args []string, b backend) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		b, err := g.backend(c.Context())
		if err != nil {
			return err
		}
		defer b.Close()
		return fn(c, args, b)
	}
}

// remoteKey annotates a verb with what it does under --host: remoteOK, or
// why it can't run through a server. A verb without it can't either.
const remoteKey = "hostfork/remote"

const remoteOK = "ok"

// remoteVerb marks c as one that runs through a server with --host.
func remoteVerb(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[remoteKey] = remoteOK
	return c
}

// localVerb marks c (and its subcommands) as one that can't run through
// a server, and why.
func localVerb(c *cobra.Command, why string) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[remoteKey] = why
	return c
}

// checkRemote refuses, under --host, a verb that can't run through a
// server, naming it (exit 122), and --root with --host.
func (g *globals) checkRemote(c *cobra.Command) error {
	u := g.server()
	if u == "" || !c.Runnable() || c.HasSubCommands() {
		return nil // nothing to do, or only help to print
	}
	via := "--host " + u
	if g.host == "" {
		via = "HOSTFORK_HOST=" + u
	}
	for p := c; p != nil; p = p.Parent() {
		switch p.Name() {
		case "help", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd, "completion":
			return nil
		}
	}
	if f := c.Flag("root"); f != nil && f.Changed {
		return usageErr("--root and %s exclude each other: the server uses its own store (drop one)", via)
	}
	why := "the server's API has no endpoint for it"
	for p := c; p != nil; p = p.Parent() {
		if w, ok := p.Annotations[remoteKey]; ok {
			if w == remoteOK {
				return nil
			}
			why = w
			break
		}
	}
	return usageErr("'%s' can't run through a server (%s): %s; run it without --host (unset HOSTFORK_HOST)", c.CommandPath(), via, why)
}

// NewRootWith builds the hostfork command tree with the verbs v
// implements; serve and mcp execute the companion (CompanionName) when v
// lacks them.
func NewRootWith(stdout, stderr io.Writer, v Verbs) (*cobra.Command, *globals) {
	return newRoot(stdout, stderr, v, "")
}

// verb is one of the root's commands: its name and aliases, how to build
// it, and why it can't run through a server ("" if it can).
type verb struct {
	name    string
	aliases []string
	build   func(g *globals, v Verbs) *cobra.Command
	local   string
}

// verbs are the root's commands, in the order help lists them. The
// verbs that run through a server with --host come first; the others say
// why they can't.
var verbs = []verb{
	{name: "run", build: plain(newRunCmd)},
	{name: "ps", aliases: []string{"list"}, build: plain(newPsCmd)},
	{name: "envs", build: plain(newEnvsCmd)},
	{name: "status", build: plain(newStatusCmd)},
	{name: "logs", build: plain(newLogsCmd)},
	{name: "wait", build: plain(newWaitCmd)},
	{name: "attach", build: plain(newAttachCmd)},
	{name: "send", build: plain(newSendCmd)},
	{name: "resize", build: plain(newResizeCmd)},
	{name: "stop", build: plain(newStopCmd)},
	{name: "events", build: plain(newEventsCmd)},
	{name: "version", build: plain(newVersionCmd)},
	{name: "plan", build: plain(newPlanCmd)},
	{name: "create", build: plain(newCreateCmd)},
	{name: "exec", build: plain(newExecCmd)},
	{name: "reap", build: plain(newReapCmd)},
	{name: "usage", build: plain(newUsageCmd)},
	{name: "export", build: plain(newExportCmd)},
	{name: "extend", build: plain(newExtendCmd)},
	{name: "cp", build: plain(newCpCmd)},
	{name: "ls", build: plain(newLsCmd)},
	{name: "fork", build: plain(newForkCmd)},
	{name: "capacity", build: plain(newCapacityCmd)},
	{name: "pause", build: plain(func(g *globals) *cobra.Command { return newPauseCmd(g, true) })},
	{name: "resume", build: plain(func(g *globals) *cobra.Command { return newPauseCmd(g, false) })},
	{name: "doctor", build: plain(newDoctorCmd)},
	{name: "baseline", build: plain(newBaselineCmd)},
	{name: "gc", build: plain(newGCCmd)},
	{name: "shell", build: plain(newShellCmd),
		local: "it gives bash this terminal, which the server can't reach"},
	{name: "support", build: plain(newSupportCmd),
		local: "it installs units on this host for a store of this host"},
	{name: "serve", build: func(g *globals, v Verbs) *cobra.Command { return newServeCmd(g, v.Serve) },
		local: "it is the server"},
	{name: "mcp", build: func(g *globals, v Verbs) *cobra.Command { return newMCPCmd(g, v.MCP) },
		local: "it serves the library in this process to an agent on stdio"},
}

// plain is a verb's build for a command that needs no Verbs.
func plain(f func(g *globals) *cobra.Command) func(*globals, Verbs) *cobra.Command {
	return func(g *globals, _ Verbs) *cobra.Command { return f(g) }
}

// verbOf is the verb args name, if they name one: the first argument
// after the root's own flags (--root, --host). Anything else (help, a
// completion request, an unknown word or flag) is "": the whole tree is
// needed to answer it.
func verbOf(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--root" || a == "--host":
			i++
		case strings.HasPrefix(a, "--root=") || strings.HasPrefix(a, "--host="):
		case strings.HasPrefix(a, "-"):
			return ""
		default:
			for _, v := range verbs {
				if a == v.name || slices.Contains(v.aliases, a) {
					return v.name
				}
			}
			return ""
		}
	}
	return ""
}

// newRoot builds the root with every verb, or with only the verb named
// only: building the whole tree (two dozen commands and their flags) was
// a fifth of a millisecond of every CLI call (decision 55).
func newRoot(stdout, stderr io.Writer, v Verbs, only string) (*cobra.Command, *globals) {
	g := &globals{out: stdout, err: stderr}
	root := &cobra.Command{
		Use:   "hostfork",
		Short: "Run owned command trees on a shared Linux host, with durable records",
		Long: `hostfork runs commands in environments that own their whole process tree,
bounds them with deadlines, and keeps durable records of what ran, why, where
its output is, whether it is alive and whether it can be stopped.

Exit codes: run/exec exit with the command's status (128+N for signal N);
hostfork's own failures use 113-127 (see docs/exit-codes.md).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.root, "root", "", "store directory (default $HOSTFORK_ROOT, /var/lib/hostfork for root, else ~/.local/state/hostfork)")
	root.PersistentFlags().StringVar(&g.host, "host", "", "run the verb through a running 'hostfork serve': unix:///path/api.sock (default $HOSTFORK_HOST; unset: in this process)")
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error { return g.checkRemote(c) }
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see '%s --help')", err, c.CommandPath())
	})
	for _, d := range verbs {
		if only != "" && d.name != only {
			continue
		}
		c := d.build(g, v)
		if d.local == "" {
			root.AddCommand(remoteVerb(c))
		} else {
			root.AddCommand(localVerb(c, d.local))
		}
	}
	return root, g
}

// Main runs the CLI and returns the process exit status.
func Main(args []string) int { return run(args, Verbs{}) }

func run(args []string, v Verbs) int {
	// A CLI call is short: collecting garbage less often costs a little
	// memory and saves a fifth of a large listing's time. GOGC still rules
	// when set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	root, g := newRoot(os.Stdout, os.Stderr, v, verbOf(args))
	g.args = args
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) && (strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag")) {
		fmt.Fprintf(g.err, "hostfork: %v (see 'hostfork --help')\n", err)
		return ExitUsage
	}
	return report(g.err, err)
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("%s takes %s (see '%s --help')", c.CommandPath(), what, c.CommandPath())
		}
		return nil
	}
}
