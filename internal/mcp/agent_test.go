package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// TestAgentNodeSDK: a coding agent written against the official MCP
// TypeScript SDK (testdata/agent, installed by .ci/run with npm ci)
// starts a dev server through `hostfork mcp`, waits until it prints
// "listening" (a wait longer than the request's own timeout, kept alive
// by progress notifications), runs requests against it, reads the last 50
// lines of its log and stops it.
func TestAgentNodeSDK(t *testing.T) {
	dir, err := filepath.Abs("testdata/agent")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Skip(t, "node is not installed (apt-get install nodejs npm; .ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testutil.Skip(t, "the MCP TypeScript SDK is not installed: npm ci --prefix internal/mcp/testdata/agent (.ci/run does)")
	}
	e := servertest.New(t)
	mcp := e.Command("mcp")
	spec, err := json.Marshal(map[string]any{"path": mcp.Path, "args": mcp.Args[1:], "env": mcp.Env})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "agent.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOSTFORK_MCP="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	t.Logf("agent: %s", out)
	if err != nil {
		t.Fatalf("the agent failed: %v", err)
	}
	var summary struct {
		OK       bool  `json:"ok"`
		Progress int   `json:"progress"`
		WaitedMS int64 `json:"waited_ms"`
	}
	if err := json.Unmarshal(out, &summary); err != nil || !summary.OK {
		t.Fatalf("the agent's summary: %s (%v)", out, err)
	}
}
