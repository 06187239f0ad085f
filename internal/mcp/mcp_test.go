package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// call calls a tool and decodes its JSON text result into out; a tool
// error is returned as its error body.
func call(t *testing.T, ctx context.Context, s *sdk.ClientSession, name string, args any, out any) *client.ErrorBody {
	t.Helper()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d contents", name, len(res.Content))
	}
	text, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("%s: content %T", name, res.Content[0])
	}
	if res.IsError {
		var eb client.ErrorBody
		if err := json.Unmarshal([]byte(text.Text), &eb); err != nil {
			t.Fatalf("%s: tool error that is not an error body: %s", name, text.Text)
		}
		return &eb
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text.Text), out); err != nil {
			t.Fatalf("%s: %v: %s", name, err, text.Text)
		}
	}
	return nil
}

// TestMCP drives a real `hostfork mcp` subprocess with the SDK's own client
// over stdio: create, start a detached command, read its logs, stop it; a
// captured run; tool errors with exit codes.
func TestMCP(t *testing.T) {
	e := servertest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "hostfork-test", Version: "1"}, nil)
	cmd := e.Command("mcp")
	s, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if got, want := strings.Join(names, ","), "create,export,extend,fork,list_dir,logs,ps,read_file,run,send_input,start,status,stop,wait,write_file"; got != want {
		t.Fatalf("tools: %s, want %s", got, want)
	}
	// Plain schemas: a list argument is "type": "array", never
	// ["null","array"], which the MCP Inspector's CLI can't read.
	for _, tl := range tools.Tools {
		raw, _ := json.Marshal(tl.InputSchema)
		if strings.Contains(string(raw), `"null"`) {
			t.Errorf("tool %s: its input schema allows null: %s", tl.Name, raw)
		}
		var sch struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if tl.Name == "run" && (json.Unmarshal(raw, &sch) != nil || sch.Properties["argv"].Type != "array") {
			t.Errorf("tool run: argv is not a plain array: %s", raw)
		}
		// One name for environment variables across tools: vars.
		_ = json.Unmarshal(raw, &sch)
		for p := range sch.Properties {
			if l := strings.ToLower(p); p != "vars" && (strings.Contains(l, "var") || strings.Contains(l, "environ")) {
				t.Errorf("tool %s: property %q: environment variables are \"vars\" in every tool", tl.Name, p)
			}
		}
		if (tl.Name == "run" || tl.Name == "start") && sch.Properties["vars"].Type != "array" {
			t.Errorf("tool %s: no vars array: %s", tl.Name, raw)
		}
		// Annotations: reading tools say so; the rest say whether they
		// destroy.
		a := tl.Annotations
		readOnly := map[string]bool{"ps": true, "status": true, "logs": true, "wait": true, "read_file": true, "list_dir": true}[tl.Name]
		switch {
		case a == nil:
			t.Errorf("tool %s: no annotations", tl.Name)
		case a.ReadOnlyHint != readOnly:
			t.Errorf("tool %s: readOnlyHint %v", tl.Name, a.ReadOnlyHint)
		case !readOnly && a.DestructiveHint == nil:
			t.Errorf("tool %s: no destructiveHint", tl.Name)
		case (tl.Name == "stop" || tl.Name == "run" || tl.Name == "start" || tl.Name == "send_input") && !*a.DestructiveHint:
			t.Errorf("tool %s: not destructive", tl.Name)
		}
	}

	var env api.Env
	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "5m", "purpose": "mcp test"}, &env); eb != nil {
		t.Fatalf("create: %+v", eb)
	}
	if env.State != api.EnvActive || env.TTL.D() != 5*time.Minute || env.OwnerExit != api.OwnerExitDetach {
		t.Fatalf("create: %s ttl %s owner_exit %s", env.State, env.TTL, env.OwnerExit)
	}
	var extended api.Env
	if eb := call(t, ctx, s, "extend", map[string]any{"env": env.ID, "ttl": "20m"}, &extended); eb != nil {
		t.Fatalf("extend: %+v", eb)
	}
	if len(extended.DeadlineMoves) != 1 || extended.DeadlineAt == nil || extended.DeadlineAt.Before(time.Now().Add(19*time.Minute)) {
		t.Fatalf("extend: deadline %v moves %+v", extended.DeadlineAt, extended.DeadlineMoves)
	}
	if eb := call(t, ctx, s, "extend", map[string]any{"env": env.ID}, nil); eb == nil || eb.ExitCode != 122 {
		t.Fatalf("extend without a deadline: %+v", eb)
	}
	dir := t.TempDir()
	var wrote api.DirEntry
	if eb := call(t, ctx, s, "write_file", map[string]any{"env": env.ID, "path": dir + "/a.txt", "content": "héllo\n", "mode": "0600"}, &wrote); eb != nil {
		t.Fatalf("write_file: %+v", eb)
	}
	if wrote.Type != "file" || wrote.Size != 7 || wrote.Mode != "-rw-------" {
		t.Fatalf("write_file: %+v", wrote)
	}
	var read struct {
		Text       string `json:"text"`
		NextOffset int64  `json:"next_offset"`
		EOF        bool   `json:"eof"`
	}
	if eb := call(t, ctx, s, "read_file", map[string]any{"env": env.ID, "path": dir + "/a.txt"}, &read); eb != nil || read.Text != "héllo\n" || !read.EOF || read.NextOffset != 7 {
		t.Fatalf("read_file: %+v %+v", eb, read)
	}
	var listed []api.DirEntry
	if eb := call(t, ctx, s, "list_dir", map[string]any{"env": env.ID, "path": dir}, &listed); eb != nil || len(listed) != 1 || listed[0].Path != "a.txt" {
		t.Fatalf("list_dir: %+v %+v", eb, listed)
	}
	if eb := call(t, ctx, s, "write_file", map[string]any{"env": env.ID, "path": dir + "/no/such/b.txt", "content": "x"}, nil); eb == nil || eb.ExitCode != 119 || !strings.Contains(eb.Message, "mkdir -p") {
		t.Fatalf("write_file below a missing directory: %+v", eb)
	}
	var started api.Command
	if eb := call(t, ctx, s, "start", map[string]any{"env": env.ID, "argv": []string{"sh", "-c", "echo ready; exec sleep 60"}}, &started); eb != nil {
		t.Fatalf("start: %+v", eb)
	}
	type logsResult struct {
		Text       string `json:"text"`
		NextOffset int64  `json:"next_offset"`
		Ended      bool   `json:"ended"`
	}
	var logs logsResult
	// Output arrives as the workload writes it: read until the line is
	// there (each call is a bounded read of what exists).
	deadline := time.Now().Add(30 * time.Second)
	for logs.Text == "" && time.Now().Before(deadline) {
		if eb := call(t, ctx, s, "logs", map[string]any{"id": started.ID}, &logs); eb != nil {
			t.Fatalf("logs: %+v", eb)
		}
		if logs.Text == "" {
			var rec api.Command
			call(t, ctx, s, "status", map[string]any{"id": started.ID}, &rec)
			if rec.Final() {
				t.Fatalf("the command ended without output: %+v", rec)
			}
		}
	}
	if logs.Text != "ready\n" || logs.NextOffset != 6 || logs.Ended {
		t.Fatalf("logs: %+v", logs)
	}
	var ps []api.Command
	call(t, ctx, s, "ps", map[string]any{}, &ps)
	if len(ps) != 1 || ps[0].ID != started.ID || ps[0].Liveness != api.Alive {
		t.Fatalf("ps: %+v", ps)
	}
	var stopped api.Command
	if eb := call(t, ctx, s, "stop", map[string]any{"id": started.ID, "grace": "1s"}, &stopped); eb != nil {
		t.Fatalf("stop: %+v", eb)
	}
	if !stopped.Final() || stopped.StopReason != api.ReasonUser {
		t.Fatalf("stop: %s %s", stopped.State, stopped.StopReason)
	}
	logs = logsResult{}
	call(t, ctx, s, "logs", map[string]any{"id": started.ID, "offset": 6}, &logs)
	if logs.Text != "" || !logs.Ended {
		t.Fatalf("logs after the stop: %+v", logs)
	}

	var run struct {
		ExitStatus int    `json:"exit_status"`
		Stdout     string `json:"stdout"`
		Complete   bool   `json:"complete"`
		Env        string `json:"env"`
	}
	if eb := call(t, ctx, s, "run", map[string]any{"argv": []string{"sh", "-c", "echo out; exit 3"}, "ttl": "1m"}, &run); eb != nil {
		t.Fatalf("run: %+v", eb)
	}
	if run.ExitStatus != 3 || run.Stdout != "out\n" || !run.Complete {
		t.Fatalf("run: %+v", run)
	}
	var runEnv api.Env
	call(t, ctx, s, "status", map[string]any{"id": run.Env}, &runEnv)
	if runEnv.State != api.EnvStopped {
		t.Fatalf("the run's environment after it: %s", runEnv.State)
	}

	if eb := call(t, ctx, s, "status", map[string]any{"id": "nonexistent"}, nil); eb == nil || eb.ExitCode != 119 || eb.Cause != "not_found" {
		t.Fatalf("status of an unknown id: %+v", eb)
	}
	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "0s"}, nil); eb == nil || eb.ExitCode != 122 {
		t.Fatalf("create with ttl 0: %+v", eb)
	}
	if eb := call(t, ctx, s, "run", map[string]any{"argv": []string{"/nonexistent/prog"}}, nil); eb == nil || eb.ExitCode != 127 {
		t.Fatalf("run of a missing program: %+v", eb)
	}
	// fork: detached children of env, with the parent recorded; a count
	// over the limit is refused (exit 122, naming it).
	if eb := call(t, ctx, s, "fork", map[string]any{"env": env.ID, "count": 65}, nil); eb == nil || eb.ExitCode != 122 || !strings.Contains(eb.Message, "64") {
		t.Fatalf("fork of 65: %+v", eb)
	}
	var kids []api.Env
	if eb := call(t, ctx, s, "fork", map[string]any{"env": env.ID, "count": 2, "ttl": "2m", "labels": map[string]string{"k": "v"}}, &kids); eb != nil {
		t.Fatalf("fork: %+v", eb)
	}
	if len(kids) != 2 {
		t.Fatalf("fork made %d environments", len(kids))
	}
	for _, k := range kids {
		if k.Fork == nil || k.Fork.Parent != env.ID || k.OwnerExit != api.OwnerExitDetach || k.TTL.D() != 2*time.Minute || k.Labels["k"] != "v" {
			t.Fatalf("fork child: %+v (fork %+v)", k, k.Fork)
		}
		if eb := call(t, ctx, s, "stop", map[string]any{"id": k.ID}, nil); eb != nil {
			t.Fatalf("stop child: %+v", eb)
		}
	}
	var stoppedEnv api.Env
	if eb := call(t, ctx, s, "stop", map[string]any{"id": env.ID}, &stoppedEnv); eb != nil || stoppedEnv.State != api.EnvStopped {
		t.Fatalf("stop env: %+v %s", eb, stoppedEnv.State)
	}
}

// TestMCPTrees: create and run take trees, view and profile (the spec's
// fields): an overlay tree at a replaced path keeps the host's directory
// unchanged, and the agent profile keeps writes to $HOME and /tmp in the
// environment; a bad tree is a tool error with exit 122 and nothing made.
func TestMCPTrees(t *testing.T) {
	e := servertest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, target, home := filepath.Join(e.Dir, "base"), filepath.Join(e.Dir, "target"), filepath.Join(e.Dir, "home")
	for _, d := range []string{base, target, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "f"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "conf"), []byte("setting\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := sdk.NewClient(&sdk.Implementation{Name: "hostfork-test", Version: "1"}, nil)
	cmd := e.Command("mcp")
	cmd.Env = append(cmd.Env, "HOME="+home)
	s, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	trees := map[string]any{"proj": map[string]any{"kind": "overlay", "source": base}}
	var run struct {
		ExitStatus int    `json:"exit_status"`
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
	}
	if eb := call(t, ctx, s, "run", map[string]any{"argv": []string{"sh", "-c", "cat " + target + "/f; echo changed > " + target + "/f; cat " + target + "/f"},
		"ttl": "1m", "trees": trees, "view": map[string]any{"replace": map[string]string{target: "proj"}}}, &run); eb != nil {
		t.Fatalf("run with a tree: %+v", eb)
	}
	if run.ExitStatus != 0 || run.Stdout != "base\nchanged\n" {
		t.Fatalf("run with a tree: %+v", run)
	}
	if b, err := os.ReadFile(filepath.Join(base, "f")); err != nil || string(b) != "base\n" {
		t.Fatalf("the lower changed: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(target, "f")); !os.IsNotExist(err) {
		t.Fatalf("the host's target changed: %v", err)
	}

	// A worktree tree: its branch carries what export --commit commits.
	if _, err := exec.LookPath("git"); err == nil {
		repo := filepath.Join(e.Dir, "repo")
		if err := os.Mkdir(repo, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "f"), []byte("committed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"}} {
			if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v: %s", args, err, out)
			}
		}
		wt := map[string]any{"w": map[string]any{"kind": "worktree", "source": repo, "ref": "main"}}
		if eb := call(t, ctx, s, "run", map[string]any{"argv": []string{"sh", "-c", "cat " + target + "/f; git -C " + target + " rev-parse --abbrev-ref HEAD"},
			"ttl": "1m", "trees": wt, "view": map[string]any{"replace": map[string]string{target: "w"}}}, &run); eb != nil {
			t.Fatalf("run with a worktree tree: %+v", eb)
		}
		if !strings.HasPrefix(run.Stdout, "committed\nhostfork/") || !strings.HasSuffix(run.Stdout, "/w\n") {
			t.Fatalf("run with a worktree tree: %+v", run)
		}
	}

	// The store and the binary may lie under /tmp here; they are shared
	// back, as plan asks.
	agentView := map[string]any{"share": []string{e.Root, filepath.Dir(e.Bin)}}
	var env api.Env
	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "5m", "profile": "agent", "view": agentView}, &env); eb != nil {
		t.Fatalf("create with the agent profile: %+v", eb)
	}
	defer call(t, context.WithoutCancel(ctx), s, "stop", map[string]any{"id": env.ID}, nil)
	if eb := call(t, ctx, s, "run", map[string]any{"argv": []string{"sh", "-c", "cat $HOME/conf; rm $HOME/conf; echo mine > $HOME/new; echo t > /tmp/hf-mcp-agent; echo x > /etc/hf-mcp-agent || echo refused"},
		"ttl": "1m", "profile": "agent", "view": agentView}, &run); eb != nil {
		t.Fatalf("run with the agent profile: %+v", eb)
	}
	if run.Stdout != "setting\nrefused\n" || !strings.Contains(run.Stderr, "Read-only file system") {
		t.Fatalf("run with the agent profile: %+v", run)
	}
	for _, p := range []string{filepath.Join(home, "new"), "/tmp/hf-mcp-agent", "/etc/hf-mcp-agent"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s reached the host: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "conf")); err != nil {
		t.Errorf("the real home lost its file: %v", err)
	}

	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "5m", "trees": map[string]any{"proj": map[string]any{"kind": "overlay", "source": "relative"}},
		"view": map[string]any{"replace": map[string]string{target: "proj"}}}, nil); eb == nil || eb.ExitCode != 122 || !strings.Contains(eb.Message, "absolute path") {
		t.Fatalf("create with a relative source: %+v", eb)
	}
	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "5m", "profile": "nosuch"}, nil); eb == nil || eb.ExitCode != 122 || !strings.Contains(eb.Message, "not defined") {
		t.Fatalf("create with an unknown profile: %+v", eb)
	}
	var envs []api.Env
	out, err := e.CLI("envs", "--all", "--json")
	if err != nil {
		t.Fatalf("envs: %v: %s", err, out)
	}
	if err := json.Unmarshal(out, &envs); err != nil {
		t.Fatal(err)
	}
	want := 3
	if _, err := exec.LookPath("git"); err == nil {
		want++ // the worktree run
	}
	if len(envs) != want {
		t.Fatalf("the refused creations left environments: %d envs", len(envs))
	}
}
