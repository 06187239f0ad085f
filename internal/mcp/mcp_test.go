package mcp_test

import (
	"context"
	"encoding/json"
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
	if got := strings.Join(names, ","); !strings.Contains(got, "run") || !strings.Contains(got, "wait") || len(names) != 10 {
		t.Fatalf("tools: %s", got)
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
	}

	var env api.Env
	if eb := call(t, ctx, s, "create", map[string]any{"ttl": "5m", "purpose": "mcp test"}, &env); eb != nil {
		t.Fatalf("create: %+v", eb)
	}
	if env.State != api.EnvActive || env.TTL.D() != 5*time.Minute || env.OwnerExit != api.OwnerExitDetach {
		t.Fatalf("create: %s ttl %s owner_exit %s", env.State, env.TTL, env.OwnerExit)
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
	var stoppedEnv api.Env
	if eb := call(t, ctx, s, "stop", map[string]any{"id": env.ID}, &stoppedEnv); eb != nil || stoppedEnv.State != api.EnvStopped {
		t.Fatalf("stop env: %+v %s", eb, stoppedEnv.State)
	}
}
