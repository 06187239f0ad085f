package e2b_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// agentsResult is what testdata/agents/agents.mjs saw.
type agentsResult struct {
	Error, Message, Step string
	SandboxID            string
	Exec                 struct {
		Text     string
		ExitCode *int
	}
	ExecFail              *int
	ReadFile, ReadNested  string
	ReadMissing           string
	HasListDir            bool
	ListDir               []string
	DirExists, PathExists bool
	Running               []bool
	ResumedSame           bool
	ResumedExec           *int
	HasPty, Tty, TtyStdin bool
}

// TestAgentsSDKSandbox: the OpenAI Agents SDK's E2B sandbox client
// (@openai/agents-extensions 0.18.0 with @openai/agents-core 0.18.0,
// pinned in testdata/agents, installed by .ci/run with npm ci) driven
// without a model against a real serve: create a session (workspace root
// and manifest files written through the SDK), execCommand (also with a
// terminal, and writeStdin into it), readFile, a listing, serialize and
// resume (connect), and close, which kills the sandbox: its environment
// is stopped.
func TestAgentsSDKSandbox(t *testing.T) {
	dir, err := filepath.Abs("testdata/agents")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents-extensions", "package.json")); err != nil {
		testutil.Skip(t, "the OpenAI Agents SDK is not installed: npm ci --prefix internal/e2b/testdata/agents (.ci/run does)")
	}
	f := e2btest.Start(t, e2btest.Options{})
	const root = "/tmp/agents-ws" // in the sandbox's own /tmp
	out := strings.TrimSpace(f.Node(t, e2btest.Run{Script: filepath.Join(dir, "agents.mjs"), Args: []string{root}, Timeout: 8 * time.Minute}))
	var r agentsResult
	if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
		t.Fatalf("agents.mjs: %v\n%s", err, out)
	}
	if r.Error != "" {
		t.Fatalf("agents.mjs, step %s: %s: %s\n%s", r.Step, r.Error, r.Message, f.Serve.Stderr())
	}
	t.Logf("agents.mjs: %s", out)
	if r.Exec.ExitCode == nil || *r.Exec.ExitCode != 0 || !strings.Contains(r.Exec.Text, root+"\nhi\n") || !strings.Contains(r.Exec.Text, "err") {
		t.Errorf("execCommand in the workspace root: %+v", r.Exec)
	}
	if r.ExecFail == nil || *r.ExecFail != 3 {
		t.Errorf("execCommand 'exit 3': exit code %v", r.ExecFail)
	}
	if r.ReadFile != "from the manifest\n" || r.ReadNested != "package a\n" {
		t.Errorf("readFile of the manifest's files: %q, %q", r.ReadFile, r.ReadNested)
	}
	if !strings.Contains(r.ReadMissing, "no-such-file") {
		t.Errorf("readFile of a missing file: %q, want an error naming it", r.ReadMissing)
	}
	if strings.Join(r.ListDir, " ") != "notes.txt src" || !r.DirExists || r.PathExists {
		t.Errorf("listing (listDir method: %v): %v, src a directory: %v, a missing path exists: %v", r.HasListDir, r.ListDir, r.DirExists, r.PathExists)
	}
	if !r.ResumedSame || r.ResumedExec == nil || *r.ResumedExec != 0 {
		t.Errorf("resume of the serialized session: same sandbox %v, exec %v", r.ResumedSame, r.ResumedExec)
	}
	if len(r.Running) != 2 || !r.Running[0] || r.Running[1] {
		t.Errorf("running before and after close: %v, want true then false", r.Running)
	}
	envs := envsOf(t, f, r.SandboxID)
	if !r.HasPty || !r.Tty || !r.TtyStdin {
		t.Errorf("execCommand with a terminal (pty %v): 42 seen %v, writeStdin 56 seen %v", r.HasPty, r.Tty, r.TtyStdin)
	}
	if len(envs) != 1 || envs[0].State != api.EnvStopped || envs[0].Labels["e2b.meta/via"] != "agents-sdk" || envs[0].Labels["e2b.template"] != "base" {
		t.Errorf("sandbox %s after close: %+v", r.SandboxID, envs)
	}
}
