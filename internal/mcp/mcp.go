// Package mcp is `hostfork mcp`: a Model Context Protocol server (the
// official Go SDK) whose tools run, start, list, inspect, read, stop,
// create, extend and export owned, bounded commands and environments, and
// read, write and list an environment's files, through the public library
// (package hostfork), so a coding agent can start a dev server or a long
// test run and come back to it.
//
// Every tool call is bounded: environments get a default expiry the agent
// can change (never none without an explicit until_stopped), a captured
// run ends with its environment, and every other call has a time limit.
// Results are the JSON of the api types; failures are tool errors carrying
// the message, the cause and the CLI's exit code. Only internal/cli imports
// it.
package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/spec"
)

// Defaults of the tools.
const (
	// DefaultTTL is an environment's expiry when the agent gives none.
	DefaultTTL = 10 * time.Minute
	// callTimeout bounds every tool call but run.
	callTimeout = 2 * time.Minute
	// defaultLogLength and maxLogLength bound what logs returns at once.
	defaultLogLength = 64 << 10
	maxLogLength     = 1 << 20
	// defaultCapture bounds the output run returns per stream (the
	// artifact files keep everything; read more with logs).
	defaultCapture = 256 << 10
)

// Options configure the server.
type Options struct {
	// Version is reported to the client.
	Version string
	// ExitCode maps an error to the CLI's exit code (cli.ExitCodeOf).
	ExitCode func(error) int
}

// NewServer returns the MCP server with hostfork's tools over h.
func NewServer(h *hostfork.Host, o Options) *sdk.Server {
	if o.ExitCode == nil {
		o.ExitCode = func(error) int { return 125 }
	}
	o.Version = cmp.Or(o.Version, "unknown")
	t := &tools{h: h, o: o}
	s := sdk.NewServer(&sdk.Implementation{Name: "hostfork", Version: o.Version}, &sdk.ServerOptions{
		Instructions: "hostfork runs commands as owned, bounded process trees in environments on this host, with durable records and logs. " +
			"Use run for a command whose result you need now; create + start for something long-running (a dev server, a long test run), then logs, status and stop. " +
			"Environments expire after their ttl (default 10m).",
	})
	yes, no := true, false
	// Annotations: what a client may assume of each tool. A command the
	// agent runs may do anything (destructive); reading never changes
	// anything; create and export only add.
	runs := &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}
	reads := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	adds := &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}
	add(s, t, "run", runs, "Run a command in a new environment and return its captured result (exit status, stdout, stderr). The environment ends when the command's tree does, or at its ttl (default 10m). trees, view and profile (as in a spec file) give it private trees at replaced paths.", t.run)
	add(s, t, "create", adds, "Create an environment that later commands (start) run in. It expires after ttl (default 10m) unless until_stopped is true; it outlives this MCP server. trees, view and profile (as in a spec file) give it private trees at replaced paths; profile agent keeps every write outside the project in the environment.", t.create)
	add(s, t, "start", runs, "Start a command in the background (a dev server, a long test run) and return its record with its id: in an environment from create (env), or in a new one of its own that ends with it (ttl default 10m). Then wait for a line of its output, read it with logs, stop it with stop.", t.start)
	add(s, t, "ps", reads, "List commands: by default the live ones (alive or unverified); all=true includes exited ones.", t.ps)
	add(s, t, "status", reads, "Everything recorded about an environment or a command (id or unique prefix).", t.status)
	add(s, t, "logs", reads, "Read a command's stdout or stderr from a byte offset, or its last lines (tail): at most length bytes (default 64 KiB). Continue from next_offset.", t.logs)
	addReq(s, t, "wait", reads, "Wait for a command: until a line of its output matches a regular expression (for), until it has printed nothing for a while (stalled), or, with neither, until its leader exits (condition tree: its whole tree). Returns why (match with stream, offset and line; stalled; ended; leader; tree) and the command's record. Bounded by timeout (default 5m); sends progress notifications while it waits.", t.wait)
	add(s, t, "send_input", runs, "Type text into a command's terminal (started with tty) or write it to its stdin pipe (started with stdin_pipe), as if typed: end a line with \\n, send control keys as characters (\\u0003 is ^C). eof ends the input (the pipe closes; ^D on a terminal).", t.sendInput)
	add(s, t, "stop", &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}, "Stop a command's tree or a whole environment (id or unique prefix). Deletes no file.", t.stop)
	add(s, t, "export", adds, "Copy one of an environment's private trees to a new destination directory.", t.export)
	add(s, t, "read_file", reads, "Read a file of an environment as its commands see it (resolved inside its view): at most length bytes (default 64 KiB, at most 1 MiB) from offset; text, or base64 when not UTF-8. Continue from next_offset.", t.readFile)
	add(s, t, "write_file", &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}, "Write a file of an environment as its commands see it (resolved inside its view), replacing it whole: content as text, or base64 with encoding base64. Its directory must exist.", t.writeFile)
	add(s, t, "list_dir", reads, "List a directory of an environment as its commands see it: its entries (depth 1, the default) or more levels; symbolic links are listed, not followed.", t.listDir)
	add(s, t, "extend", &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}, "Move an environment's deadline later or earlier: ttl from now (e.g. 30m) or until an RFC 3339 instant. An earlier deadline stops it then.", t.extend)
	add(s, t, "fork", adds, "Make count new environments whose private trees start as this environment's trees at one instant (its commands are frozen for the moment the trees are taken; processes are not cloned). Each child is detached, with the parent's spec and its own trees, view, limits and ttl.", t.fork)
	return s
}

// Run serves on stdin/stdout until the client disconnects (after every
// request it sent is answered) or ctx ends.
func Run(ctx context.Context, h *hostfork.Host, o Options) error {
	return NewServer(h, o).Run(ctx, newStdio(os.Stdin, os.Stdout).transport(ctx))
}

type tools struct {
	h *hostfork.Host
	o Options
}

// add registers a tool whose handler returns a value (marshalled as the
// result's JSON text) or an error (a tool error with message, cause and
// exit code).
func add[In any](s *sdk.Server, t *tools, name string, ann *sdk.ToolAnnotations, desc string, fn func(context.Context, In) (any, error)) {
	addReq(s, t, name, ann, desc, func(ctx context.Context, _ *sdk.CallToolRequest, in In) (any, error) { return fn(ctx, in) })
}

// addReq is add for a handler that needs the request (to send progress).
func addReq[In any](s *sdk.Server, t *tools, name string, ann *sdk.ToolAnnotations, desc string, fn func(context.Context, *sdk.CallToolRequest, In) (any, error)) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: the input schema of %s: %v", name, err))
	}
	plainTypes(schema)
	sdk.AddTool(s, &sdk.Tool{Name: name, Description: desc, InputSchema: schema, Annotations: ann}, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		v, err := fn(ctx, req, in)
		if err != nil {
			b, _ := json.Marshal(client.ErrorBody{Message: err.Error(), Cause: client.CauseOf(err), ExitCode: t.o.ExitCode(err)})
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil, nil
		}
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
			v = reflect.MakeSlice(rv.Type(), 0, 0).Interface() // a list is [], never null
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil, nil
	})
}

// plainTypes gives every property of the schema one type: the inferred
// schema of a slice or map allows null too (["null","array"]), which some
// clients can't read (the MCP Inspector's CLI fails on it); an argument
// left out is what an absent list means here.
func plainTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && (s.Types[0] == "null" || s.Types[1] == "null") {
		s.Type = s.Types[0]
		if s.Type == "null" {
			s.Type = s.Types[1]
		}
		s.Types = nil
	}
	for _, p := range s.Properties {
		plainTypes(p)
	}
	plainTypes(s.Items)
	plainTypes(s.AdditionalProperties)
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// lifetime is the expiry the agent asked for: a ttl, the default, or an
// explicit until_stopped.
func lifetime(ttl string, untilStopped bool) (spec.Lifetime, error) {
	var l spec.Lifetime
	switch {
	case untilStopped && ttl != "":
		return l, fmt.Errorf("give ttl or until_stopped, not both: %w", api.ErrInvalid)
	case untilStopped:
		l.UntilStopped = true
	case ttl == "":
		l.MaxRuntime = spec.Duration(DefaultTTL)
	default:
		d, err := api.ParseDuration(ttl)
		if err != nil {
			return l, err
		}
		if d == 0 {
			return l, fmt.Errorf("ttl must be positive (or until_stopped: true): %w", api.ErrInvalid)
		}
		l.MaxRuntime = spec.Duration(d)
	}
	return l, nil
}

// envArgs are what create and run take to describe an environment.
type envArgs struct {
	TTL          string            `json:"ttl,omitempty" jsonschema:"expiry of the environment from its start, grace included, e.g. 5m (default 10m)"`
	UntilStopped bool              `json:"until_stopped,omitempty" jsonschema:"no expiry: runs until stopped (explicit choice)"`
	Purpose      string            `json:"purpose,omitempty" jsonschema:"why this runs (shown by ps and status)"`
	Labels       map[string]string `json:"labels,omitempty" jsonschema:"labels to find it again"`
	Memory       string            `json:"memory,omitempty" jsonschema:"memory budget for the whole environment, e.g. 2G"`
	CPUs         float64           `json:"cpus,omitempty" jsonschema:"CPU budget in cores, e.g. 1.5"`
	Pids         int64             `json:"pids,omitempty" jsonschema:"maximum number of processes"`
	// Trees, View and Profile are the spec's fields of the same names
	// (docs/spec.md).
	Trees   map[string]spec.Tree `json:"trees,omitempty" jsonschema:"private trees by name, e.g. {\"proj\": {\"kind\": \"overlay\", \"source\": \"/srv/proj\"}} (kind btrfs, overlay or copy; source an absolute path, or baseline a registered name)"`
	View    spec.View            `json:"view,omitempty" jsonschema:"the view: replace maps a host directory to a tree name, e.g. {\"replace\": {\"/work/proj\": \"proj\"}}; also read_only, share, scratch (lists of paths)"`
	Profile string               `json:"profile,omitempty" jsonschema:"a named set of view rules: agent (private /tmp, $HOME as an overlay of the real home, everything else read-only)"`
}

func (a envArgs) spec(ownerExit string) (spec.Environment, error) {
	var s spec.Environment
	l, err := lifetime(a.TTL, a.UntilStopped)
	if err != nil {
		return s, err
	}
	l.OwnerExit = ownerExit
	s.Lifetime, s.Purpose, s.Labels = l, a.Purpose, a.Labels
	if a.Memory != "" {
		n, err := spec.ParseSize(a.Memory)
		if err != nil {
			return s, err
		}
		s.Limits.Memory = spec.Size(n)
	}
	s.Limits.CPUs, s.Limits.Pids = a.CPUs, a.Pids
	s.Trees, s.View, s.Profile = a.Trees, a.View, a.Profile
	if s.Profile != "" {
		return s, nil // Plan merges the profile, then validates
	}
	return s, s.Validate()
}

type runArgs struct {
	Argv []string `json:"argv" jsonschema:"the program and its arguments, e.g. [\"go\", \"test\", \"./...\"]"`
	Cwd  string   `json:"cwd,omitempty" jsonschema:"working directory"`
	Vars []string `json:"vars,omitempty" jsonschema:"extra NAME=VALUE environment variables"`
	envArgs
	Timeout   string `json:"timeout,omitempty" jsonschema:"stop the command this long after it starts, e.g. 2m (never beyond the ttl)"`
	MaxOutput int    `json:"max_output,omitempty" jsonschema:"bytes of each stream to return (default 262144); the logs keep everything"`
}

// run is `hostfork run --capture`: the environment stops when the tree
// exits, at its ttl, or when the call is cancelled (the tree is stopped).
func (t *tools) run(ctx context.Context, a runArgs) (any, error) {
	if len(a.Argv) == 0 {
		return nil, fmt.Errorf("argv is required: %w", api.ErrInvalid)
	}
	sp, err := a.envArgs.spec(spec.OwnerExitStop)
	if err != nil {
		return nil, err
	}
	timeout, err := optDuration("timeout", a.Timeout)
	if err != nil {
		return nil, err
	}
	if _, err := hostfork.LookPath(a.Argv[0], nil); err != nil {
		return nil, err
	}
	p, err := t.h.Plan(ctx, sp)
	if err != nil {
		return nil, err
	}
	cmd := t.h.Command(a.Argv...)
	cmd.Cwd, cmd.EnvSet, cmd.Timeout, cmd.Purpose, cmd.Labels = a.Cwd, a.Vars, timeout, a.Purpose, a.Labels
	cmd.Output = hostfork.OutputPipe
	cmd.CaptureOutput = true
	cmd.CaptureLimit = defaultCapture
	if a.MaxOutput > 0 && a.MaxOutput < hostfork.MaxCapture {
		cmd.CaptureLimit = a.MaxOutput
	}
	if _, err := t.h.Run(ctx, p, cmd); err != nil {
		return nil, err
	}
	res, err := cmd.Capture(ctx)
	if err != nil {
		return nil, err
	}
	if res.Record.TreeState != hostfork.PhaseExited && !res.Record.Final() {
		// What the leader left behind ends with the run, as in the CLI.
		sctx, cancel := bounded(context.WithoutCancel(ctx))
		_, _ = cmd.StopTree(sctx, hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
		cancel()
	}
	wctx, cancel := bounded(ctx)
	defer cancel()
	if final, err := cmd.WaitTree(wctx); err == nil {
		res.Record = final
	}
	status, ok := hostfork.ExitStatus(res.Record)
	out := map[string]any{
		"command":       res.Record.ID,
		"env":           res.Record.Env,
		"exit_status":   status,
		"exit_observed": ok,
		"exit_code":     res.Record.ExitCode,
		"signal":        res.Record.Signal,
		"stop_reason":   res.Record.StopReason,
		"oom":           res.Record.OOM,
		"complete":      res.Complete(),
		"capture": map[string]any{
			"stdout": map[string]any{"state": res.Stdout.State, "bytes": res.Stdout.Bytes, "error": res.Stdout.Error, "artifact": res.Stdout.Artifact},
			"stderr": map[string]any{"state": res.Stderr.State, "bytes": res.Stderr.Bytes, "error": res.Stderr.Error, "artifact": res.Stderr.Artifact},
		},
		"receipt": res.Receipt,
	}
	for name, b := range map[string][]byte{"stdout": res.Stdout.Data, "stderr": res.Stderr.Data} {
		if utf8.Valid(b) {
			out[name] = string(b)
		} else {
			out[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
		}
	}
	return out, nil
}

func optDuration(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := api.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// create makes a detached environment: it outlives this server until its
// ttl (or a stop, with until_stopped).
func (t *tools) create(ctx context.Context, a envArgs) (any, error) {
	sp, err := a.spec(spec.OwnerExitDetach)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	p, err := t.h.Plan(ctx, sp)
	if err != nil {
		return nil, err
	}
	env, err := t.h.Create(ctx, p)
	if err != nil {
		return nil, err
	}
	rec, _, err := t.h.Status(ctx, env.ID())
	if err != nil {
		return nil, err
	}
	return hostfork.RedactEnv(*rec), nil
}

type startArgs struct {
	Env  string   `json:"env,omitempty" jsonschema:"the environment's id (from create); without it the command gets a new environment of its own that ends with it (ttl, until_stopped, memory, cpus, pids apply)"`
	Argv []string `json:"argv" jsonschema:"the program and its arguments"`
	Cwd  string   `json:"cwd,omitempty" jsonschema:"working directory"`
	Vars []string `json:"vars,omitempty" jsonschema:"extra NAME=VALUE environment variables"`
	envArgs
	Timeout   string `json:"timeout,omitempty" jsonschema:"stop the command this long after it starts (never beyond the environment's ttl)"`
	TTY       bool   `json:"tty,omitempty" jsonschema:"give the command a terminal (its output then is one stream, stdout); type into it with send_input"`
	Cols      int    `json:"cols,omitempty" jsonschema:"the terminal's width with tty (default 80)"`
	Rows      int    `json:"rows,omitempty" jsonschema:"the terminal's height with tty (default 24)"`
	StdinPipe bool   `json:"stdin_pipe,omitempty" jsonschema:"without tty: give the command a stdin pipe that send_input writes to"`
}

// start runs a detached command (output in files) under the environment's
// bounds; it outlives the call and this server.
func (t *tools) start(ctx context.Context, a startArgs) (any, error) {
	if len(a.Argv) == 0 {
		return nil, fmt.Errorf("argv is required: %w", api.ErrInvalid)
	}
	timeout, err := optDuration("timeout", a.Timeout)
	if err != nil {
		return nil, err
	}
	switch {
	case a.TTY && a.StdinPipe:
		return nil, fmt.Errorf("a tty is the command's input already: drop stdin_pipe: %w", api.ErrInvalid)
	case !a.TTY && (a.Cols != 0 || a.Rows != 0):
		return nil, fmt.Errorf("cols and rows size a terminal: they need tty: %w", api.ErrInvalid)
	case a.Cols < 0 || a.Rows < 0 || a.Cols > 65535 || a.Rows > 65535:
		return nil, fmt.Errorf("cols %d, rows %d: give sizes from 1 to 65535: %w", a.Cols, a.Rows, api.ErrInvalid)
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	var cmd *hostfork.Command
	var p *hostfork.Plan
	if a.Env != "" {
		if a.envArgs.TTL != "" || a.envArgs.UntilStopped || a.envArgs.Memory != "" || a.envArgs.CPUs != 0 || a.envArgs.Pids != 0 {
			return nil, fmt.Errorf("ttl, until_stopped, memory, cpus and pids describe a new environment: leave them out with env (the environment has its own): %w", api.ErrInvalid)
		}
		env, err := t.h.OpenEnv(ctx, a.Env)
		if err != nil {
			return nil, err
		}
		cmd = env.Command(a.Argv...)
	} else {
		sp, err := a.envArgs.spec(spec.OwnerExitDetach)
		if err != nil {
			return nil, err
		}
		if _, err := hostfork.LookPath(a.Argv[0], nil); err != nil {
			return nil, err
		}
		if p, err = t.h.Plan(ctx, sp); err != nil {
			return nil, err
		}
		cmd = t.h.Command(a.Argv...)
	}
	cmd.Cwd, cmd.EnvSet, cmd.Purpose, cmd.Labels, cmd.Timeout = a.Cwd, a.Vars, a.Purpose, a.Labels, timeout
	cmd.Output = hostfork.OutputFiles
	cmd.OwnerExit = hostfork.OwnerExitDetach
	cmd.TTY, cmd.Size = a.TTY, hostfork.TermSize{Cols: uint16(a.Cols), Rows: uint16(a.Rows)}
	if a.StdinPipe {
		cmd.Stdin = hostfork.StdinPipe
	}
	// A context whose Done is nil: the library arms no cancellation, so
	// the tree keeps the environment's bounds after this call.
	if p != nil {
		_, err = t.h.Run(context.WithoutCancel(ctx), p, cmd)
	} else {
		err = cmd.Start(context.WithoutCancel(ctx))
	}
	if err != nil {
		return nil, err
	}
	_, rec, err := t.h.Status(ctx, cmd.ID())
	if err != nil {
		return nil, err
	}
	return rec, nil
}

type psArgs struct {
	All   bool   `json:"all,omitempty" jsonschema:"include exited commands"`
	Env   string `json:"env,omitempty" jsonschema:"only the commands of this environment"`
	Label string `json:"label,omitempty" jsonschema:"label selector, e.g. role=server"`
}

func (t *tools) ps(ctx context.Context, a psArgs) (any, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	f := hostfork.CommandFilter{Live: !a.All}
	if a.Label != "" {
		sel, err := hostfork.ParseSelector(a.Label)
		if err != nil {
			return nil, err
		}
		f.Labels = sel
	}
	if a.Env != "" {
		env, _, err := t.h.Status(ctx, a.Env)
		if err != nil {
			return nil, err
		}
		if env == nil {
			return nil, fmt.Errorf("%s is a command; give an environment id: %w", a.Env, api.ErrInvalid)
		}
		f.Env = env.ID
	}
	return t.h.Commands(ctx, f)
}

type idArgs struct {
	ID string `json:"id" jsonschema:"an environment or command id, or a unique prefix"`
}

func (t *tools) status(ctx context.Context, a idArgs) (any, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	env, cmd, err := t.h.Status(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	if env != nil {
		return hostfork.RedactEnv(*env), nil
	}
	return cmd, nil
}

type logsArgs struct {
	ID     string `json:"id" jsonschema:"a command id or unique prefix"`
	Stream string `json:"stream,omitempty" jsonschema:"stdout (default) or stderr"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (next_offset of the previous call)"`
	Tail   int    `json:"tail,omitempty" jsonschema:"start at the last N lines instead of offset (the answer's offset says where that is)"`
	Length int    `json:"length,omitempty" jsonschema:"most bytes to return (default 65536, at most 1048576)"`
}

// logsResult is one slice of a command's output.
type logsResult struct {
	Command string `json:"command"`
	Stream  string `json:"stream"`
	slice
	// Ended: the command's tree is gone and everything up to next_offset
	// is all it wrote.
	Ended bool         `json:"ended"`
	State api.Liveness `json:"state"`
}

// slice is what a read returned: text, or base64 when not UTF-8.
type slice struct {
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	Bytes      int    `json:"bytes"`
	Text       string `json:"text,omitempty"`
	Base64     string `json:"base64,omitempty"`
}

// sliceOf is buf, read at off. A multi-byte character cut at its end
// when more may follow is left out (cut): the next read, from
// next_offset, returns it whole.
func sliceOf(buf []byte, off int64, more bool) (sl slice, cut bool) {
	sl = slice{Offset: off, NextOffset: off + int64(len(buf)), Bytes: len(buf)}
	switch n := validPrefix(buf); {
	case n == len(buf):
		sl.Text = string(buf)
	case n >= len(buf)-3 && n > 0 && more:
		sl.Text = string(buf[:n])
		sl.Bytes, sl.NextOffset = n, off+int64(n)
		return sl, true
	default:
		sl.Base64 = base64.StdEncoding.EncodeToString(buf)
	}
	return sl, false
}

func (t *tools) logs(ctx context.Context, a logsArgs) (any, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	n := readLength(a.Length)
	stream := cmp.Or(a.Stream, "stdout")
	if a.Tail < 0 || (a.Tail > 0 && a.Offset > 0) {
		return nil, fmt.Errorf("tail is a number of lines and excludes offset: %w", api.ErrInvalid)
	}
	cmd, err := t.h.OpenCommand(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	// The record first: if the tree is gone now, what the read finds is
	// everything it wrote.
	_, rec, err := t.h.Status(ctx, cmd.ID())
	if err != nil {
		return nil, err
	}
	if a.Tail > 0 {
		if a.Offset, err = cmd.TailOffset(ctx, stream, a.Tail); err != nil {
			return nil, err
		}
	}
	rd, err := cmd.Logs(ctx, hostfork.LogOptions{Stream: stream, Offset: a.Offset})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	buf := make([]byte, n)
	got, err := io.ReadFull(rd, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	sl, cut := sliceOf(buf[:got], a.Offset, true)
	return logsResult{Command: cmd.ID(), Stream: stream, slice: sl, Ended: rec.Final() && got < n && !cut, State: rec.Liveness}, nil
}

// readLength is the bytes a read returns at most: length, else the
// default, never more than maxLogLength.
func readLength(length int) int {
	if length <= 0 {
		return defaultLogLength
	}
	return min(length, maxLogLength)
}

// validPrefix is the length of the longest prefix of b that is valid
// UTF-8 and ends within the last three bytes' cut, else len(b) if all is.
func validPrefix(b []byte) int {
	if utf8.Valid(b) {
		return len(b)
	}
	for cut := len(b) - 1; cut >= 0 && cut >= len(b)-3; cut-- {
		if utf8.Valid(b[:cut]) {
			return cut
		}
	}
	return -1
}

type waitArgs struct {
	ID        string `json:"id" jsonschema:"a command id or unique prefix"`
	For       string `json:"for,omitempty" jsonschema:"a regular expression (Go RE2 syntax), e.g. listening on [0-9]+: return when a line of the output matches"`
	Stream    string `json:"stream,omitempty" jsonschema:"with for: search only stdout or stderr (default both)"`
	Since     int64  `json:"since,omitempty" jsonschema:"with for and stream: the byte offset to search from (a previous match's next)"`
	Stalled   string `json:"stalled,omitempty" jsonschema:"return when the command has printed nothing for this long, e.g. 5s"`
	Condition string `json:"condition,omitempty" jsonschema:"without for and stalled: leader (default, the command's own process exits) or tree (all its processes are gone)"`
	Timeout   string `json:"timeout,omitempty" jsonschema:"give up after this long, e.g. 10m (default 5m, at most 1h); the command runs on"`
}

// Bounds of wait, and how often it tells the client it is still waiting.
const (
	defaultWait   = 5 * time.Minute
	maxWait       = time.Hour
	progressEvery = time.Second
)

// wait blocks as the library's WaitUntil, bounded by its timeout, with a
// progress notification every second (when the client asked for them
// with a progress token), so that a client's request timeout that resets
// on progress doesn't end a long wait.
func (t *tools) wait(ctx context.Context, req *sdk.CallToolRequest, a waitArgs) (any, error) {
	o := hostfork.WaitOptions{Stream: a.Stream, Since: a.Since}
	switch a.Condition {
	case "", "leader":
	case "tree":
		o.Tree = true
	default:
		return nil, fmt.Errorf("condition %q: use leader or tree: %w", a.Condition, api.ErrInvalid)
	}
	if a.For != "" {
		re, err := regexp.Compile(a.For)
		if err != nil {
			return nil, fmt.Errorf("for %q is not a valid regular expression (Go RE2 syntax): %v: %w", a.For, err, api.ErrInvalid)
		}
		o.For = re
	}
	var err error
	if o.Stalled, err = optDuration("stalled", a.Stalled); err != nil {
		return nil, err
	}
	timeout, err := optDuration("timeout", a.Timeout)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = defaultWait
	}
	timeout = min(timeout, maxWait)
	cmd, err := t.h.OpenCommand(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if token := req.Params.GetProgressToken(); token != nil {
		go func() {
			tick := time.NewTicker(progressEvery)
			defer tick.Stop()
			start := time.Now()
			for {
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
				}
				waited := time.Since(start)
				_ = req.Session.NotifyProgress(wctx, &sdk.ProgressNotificationParams{ProgressToken: token,
					Progress: waited.Seconds(), Total: timeout.Seconds(),
					Message: fmt.Sprintf("waiting for command %s (%s of %s)", cmd.ID(), waited.Round(time.Second), timeout)})
			}
		}()
	}
	out, err := cmd.WaitUntil(wctx, o)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("the wait's timeout (%s) passed; command %s runs on: %w", timeout, cmd.ID(), api.ErrTimedOut)
		}
		if !errors.Is(err, api.ErrUnverified) || out.Command.ID == "" {
			return nil, err
		}
	}
	return out, nil
}

type sendArgs struct {
	ID   string `json:"id" jsonschema:"a command id or unique prefix (started with tty or stdin_pipe)"`
	Text string `json:"text,omitempty" jsonschema:"what to type, e.g. \"npm test\\n\""`
	EOF  bool   `json:"eof,omitempty" jsonschema:"after the text, end the input (the pipe closes; ^D on a terminal)"`
}

// sendResult is what send_input answers.
type sendResult struct {
	Command string `json:"command"`
	Bytes   int    `json:"bytes"`
	EOF     bool   `json:"eof"`
}

// sendInput types into the command's session (Command.Send), then ends
// its input with eof (Command.CloseStdin).
func (t *tools) sendInput(ctx context.Context, a sendArgs) (any, error) {
	if a.Text == "" && !a.EOF {
		return nil, fmt.Errorf("nothing to send: give text or eof: %w", api.ErrInvalid)
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	cmd, err := t.h.OpenCommand(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	if a.Text != "" {
		if err := cmd.Send(ctx, []byte(a.Text)); err != nil {
			return nil, err
		}
	}
	if a.EOF {
		if err := cmd.CloseStdin(ctx); err != nil {
			return nil, err
		}
	}
	return sendResult{Command: cmd.ID(), Bytes: len(a.Text), EOF: a.EOF}, nil
}

type stopArgs struct {
	ID    string `json:"id" jsonschema:"an environment or command id, or a unique prefix"`
	Grace string `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL, e.g. 5s (default the environment's, 2s)"`
}

func (t *tools) stop(ctx context.Context, a stopArgs) (any, error) {
	grace, err := optDuration("grace", a.Grace)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	kind, id, err := t.h.Resolve(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	o := hostfork.StopOptions{Grace: grace}
	if kind == "command" {
		return t.h.StopCommand(ctx, id, o)
	}
	rec, err := t.h.StopEnv(ctx, id, o)
	if err != nil {
		return nil, err
	}
	return hostfork.RedactEnv(*rec), nil
}

type extendArgs struct {
	Env   string `json:"env" jsonschema:"the environment's id or unique prefix"`
	TTL   string `json:"ttl,omitempty" jsonschema:"the new deadline, this long from now, e.g. 30m"`
	Until string `json:"until,omitempty" jsonschema:"the new deadline, an RFC 3339 instant (instead of ttl)"`
}

func (t *tools) extend(ctx context.Context, a extendArgs) (any, error) {
	ttl, err := optDuration("ttl", a.TTL)
	if err != nil {
		return nil, err
	}
	o := hostfork.ExtendOptions{TTL: api.Duration(ttl)}
	if a.Until != "" {
		at, err := time.Parse(time.RFC3339, a.Until)
		if err != nil {
			return nil, fmt.Errorf("until %q: give an RFC 3339 instant, e.g. 2026-12-07T18:00:00Z: %w", a.Until, api.ErrInvalid)
		}
		o.Until = &at
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	rec, err := t.h.Extend(ctx, a.Env, o)
	if err != nil {
		return nil, err
	}
	return hostfork.RedactEnv(*rec), nil
}

type readFileArgs struct {
	Env    string `json:"env" jsonschema:"the environment's id or unique prefix"`
	Path   string `json:"path" jsonschema:"an absolute path as the environment's commands see it"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (next_offset of the previous call)"`
	Length int    `json:"length,omitempty" jsonschema:"most bytes to return (default 65536, at most 1048576)"`
}

type readFileResult struct {
	Path string `json:"path"`
	slice
	Size int64 `json:"size"`
	EOF  bool  `json:"eof"`
}

func (t *tools) readFile(ctx context.Context, a readFileArgs) (any, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	n := readLength(a.Length)
	f, err := t.h.ReadFile(ctx, a.Env, a.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory: list it with list_dir: %w", a.Path, api.ErrInvalid)
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, a.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	sl, _ := sliceOf(buf[:got], a.Offset, a.Offset+int64(got) < st.Size())
	return readFileResult{Path: a.Path, slice: sl, Size: st.Size(), EOF: sl.NextOffset >= st.Size()}, nil
}

type writeFileArgs struct {
	Env      string `json:"env" jsonschema:"the environment's id or unique prefix"`
	Path     string `json:"path" jsonschema:"an absolute path as the environment's commands see it; its directory must exist"`
	Content  string `json:"content" jsonschema:"the whole new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permissions in octal, e.g. 0755 (default: the existing file's, else 0644)"`
}

func (t *tools) writeFile(ctx context.Context, a writeFileArgs) (any, error) {
	b := []byte(a.Content)
	switch a.Encoding {
	case "", "text":
	case "base64":
		var err error
		if b, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return nil, fmt.Errorf("content is not base64: %v: %w", err, api.ErrInvalid)
		}
	default:
		return nil, fmt.Errorf("encoding %q: use text or base64: %w", a.Encoding, api.ErrInvalid)
	}
	var perm os.FileMode
	if a.Mode != "" {
		n, err := strconv.ParseUint(a.Mode, 8, 32)
		if err != nil || n == 0 || n > 0o777 {
			return nil, fmt.Errorf("mode %q: give permissions in octal, e.g. 0644: %w", a.Mode, api.ErrInvalid)
		}
		perm = os.FileMode(n)
	}
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	return t.h.WriteFile(ctx, a.Env, a.Path, bytes.NewReader(b), perm)
}

type listDirArgs struct {
	Env   string `json:"env" jsonschema:"the environment's id or unique prefix"`
	Path  string `json:"path" jsonschema:"an absolute path of a directory as the environment's commands see it"`
	Depth int    `json:"depth,omitempty" jsonschema:"levels to list: 1 (default) its entries, more for levels below, -1 the whole tree"`
}

func (t *tools) listDir(ctx context.Context, a listDirArgs) (any, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	// No depth lists the entries (1); a negative one the whole tree (ReadDir's 0).
	return t.h.ReadDir(ctx, a.Env, a.Path, max(cmp.Or(a.Depth, 1), 0))
}

type exportArgs struct {
	Env         string `json:"env" jsonschema:"the environment's id or unique prefix"`
	Tree        string `json:"tree" jsonschema:"the name of one of its private trees"`
	Destination string `json:"destination" jsonschema:"an absolute path that does not exist yet"`
}

func (t *tools) export(ctx context.Context, a exportArgs) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	return t.h.Export(ctx, a.Env, a.Tree, a.Destination, hostfork.ExportOptions{})
}

type forkArgs struct {
	Env    string            `json:"env" jsonschema:"the environment's id or unique prefix"`
	Count  int               `json:"count,omitempty" jsonschema:"how many environments to make (default 1, at most 64)"`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"labels added to the parent's on every child"`
	TTL    string            `json:"ttl,omitempty" jsonschema:"each child's time limit, e.g. 30m (default: the parent's)"`
}

// fork makes detached children (they outlive this server, like create's
// environments).
func (t *tools) fork(ctx context.Context, a forkArgs) (any, error) {
	ttl, err := optDuration("ttl", a.TTL)
	if err != nil {
		return nil, err
	}
	a.Count = cmp.Or(a.Count, 1)
	ctx, cancel := bounded(context.WithoutCancel(ctx))
	defer cancel()
	recs, err := t.h.Fork(ctx, a.Env, hostfork.ForkOptions{Count: a.Count, Labels: a.Labels, TTL: ttl, OwnerExit: spec.OwnerExitDetach})
	if err != nil {
		return nil, err
	}
	out := make([]hostfork.EnvRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, hostfork.RedactEnv(r))
	}
	return out, nil
}
