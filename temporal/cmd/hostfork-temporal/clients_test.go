package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// TestOutsideClients runs RunInEnvironment the ways a user who does not
// write Go would, against the embedded server and a real worker:
//   - `hostfork-temporal submit`: it prints the Result and exits with the
//     command's status; a command that exits 3 leaves the workflow Failed
//     with a non-retryable CommandFailed whose details are that Result;
//   - the TypeScript client of docs/temporal.md (@temporalio/client, pinned
//     in testdata/ts-client, installed by .ci/run with npm ci), compiled
//     with tsc and run with node.
func TestOutsideClients(t *testing.T) {
	c := newCluster(t)
	a := c.node("a")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("submit", func(t *testing.T) {
		for _, tt := range []struct {
			id, script string
			status     int
			wf         enumspb.WorkflowExecutionStatus
		}{
			{"submit-ok", "echo hello", 0, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
			{"submit-exit-3", "echo out; echo err >&2; exit 3", 3, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED},
		} {
			cmd := exec.CommandContext(ctx, exe, "submit", "--address", c.srv.Address(), "--namespace", c.srv.Namespace(),
				"--id", tt.id, "--", "sh", "-c", tt.script)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.status {
				t.Fatalf("%s: submit exited %d, want %d; stderr: %s", tt.id, code, tt.status, stderr.String())
			}
			var res flow.Result
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				t.Fatalf("%s: stdout is not a Result: %v\n%s", tt.id, err, stdout.String())
			}
			if res.ExitStatus != tt.status || len(res.Commands) != 1 || res.Commands[0].ExitCode == nil || *res.Commands[0].ExitCode != tt.status ||
				res.Stopped == nil || res.Stopped.State != hostfork.EnvStopped || res.Node != "a" {
				t.Fatalf("%s: result %s", tt.id, stdout.String())
			}
			if tt.status != 0 {
				t.Logf("submit's output, the workflow's Result:\n%s", stdout.String())
			}
			d, err := c.c.DescribeWorkflowExecution(ctx, tt.id, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := d.GetWorkflowExecutionInfo().GetStatus(); got != tt.wf {
				t.Fatalf("%s: workflow status %v, want %v", tt.id, got, tt.wf)
			}
			err = c.c.GetWorkflow(ctx, tt.id, "").Get(ctx, nil)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("%s: %v", tt.id, err)
				}
				continue
			}
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != flow.ErrCommandFailed || !ae.NonRetryable() {
				t.Fatalf("%s: workflow error %v, want a non-retryable %s", tt.id, err, flow.ErrCommandFailed)
			}
			var details flow.Result
			if err := ae.Details(&details); err != nil || len(details.Commands) != 1 || details.Commands[0].ID != res.Commands[0].ID {
				t.Fatalf("%s: details %+v (%v), want the Result", tt.id, details, err)
			}
			t.Logf("%s: %v", tt.id, err)
		}
	})

	t.Run("typescript", func(t *testing.T) {
		dir, err := filepath.Abs(filepath.Join("testdata", "ts-client"))
		if err != nil {
			t.Fatal(err)
		}
		checkDocQuotes(t, filepath.Join(dir, "run-in-environment.ts"))
		_, nodeErr := exec.LookPath("node")
		tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
		_, tscErr := os.Stat(tsc)
		skipUnless(t, nodeErr == nil && tscErr == nil,
			"needs node and the pinned npm packages: cd temporal/cmd/hostfork-temporal/testdata/ts-client && npm ci")
		out := t.TempDir()
		if b, err := exec.CommandContext(ctx, tsc, "-p", dir, "--outDir", out).CombinedOutput(); err != nil {
			t.Fatalf("tsc: %v\n%s", err, b)
		}
		for _, tt := range []struct {
			id     string
			argv   []string
			status int
			ending string
		}{
			{"ts-ok", []string{"sh", "-c", "echo hello"}, 0, "ok"},
			{"ts-exit-3", []string{"sh", "-c", "exit 3"}, 3, flow.ErrCommandFailed},
			{"ts-cancel", []string{"sleep", "1000"}, 128 + 15, "Cancelled"},
		} {
			cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(out, "run-in-environment.js"), tt.id}, tt.argv...)...)
			cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"),
				"TEMPORAL_ADDRESS="+c.srv.Address(), "TEMPORAL_NAMESPACE="+c.srv.Namespace())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tt.ending == "Cancelled" {
				c.liveCommand(ctx, tt.id, 1)
				if err := c.c.CancelWorkflow(ctx, tt.id, ""); err != nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatal(err)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s: node: %v\n%s", tt.id, err, stderr.String())
			}
			var got struct {
				WorkflowID string      `json:"workflow_id"`
				Ending     string      `json:"ending"`
				Result     flow.Result `json:"result"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("%s: %v\n%s", tt.id, err, stdout.String())
			}
			res := got.Result
			if got.Ending != tt.ending || res.ExitStatus != tt.status || len(res.Commands) != 1 || res.Node != "a" ||
				res.Stopped == nil || res.Stopped.State != hostfork.EnvStopped {
				t.Fatalf("%s: %s", tt.id, stdout.String())
			}
			// The record the client got is the node's.
			_, rec, err := a.h.Status(ctx, res.Commands[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := rec.ExitStatus(); !ok || s != tt.status || strings.Join(rec.Argv, " ") != strings.Join(tt.argv, " ") ||
				rec.Labels[flow.LabelWorkflow] != tt.id {
				t.Fatalf("%s: the node's record: status %d, argv %q, labels %v", tt.id, s, rec.Argv, rec.Labels)
			}
		}
	})
}

// TestTemporalCLI runs the `temporal` CLI commands of docs/temporal.md
// ("From the temporal CLI") against the embedded server and a real worker.
// The CLI is not part of CI (it is a large build of its own): it runs only
// with HOSTFORK_TEMPORAL_CLI=path/to/temporal, e.g. after
// `GOBIN=/tmp/tcli go install github.com/temporalio/cli/cmd/temporal@v1.5.1`.
func TestTemporalCLI(t *testing.T) {
	cli := os.Getenv("HOSTFORK_TEMPORAL_CLI")
	if cli == "" {
		t.Skip("needs the temporal CLI: set HOSTFORK_TEMPORAL_CLI=path/to/temporal")
	}
	c := newCluster(t)
	c.node("a")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	temporalCLI := func(args ...string) (string, int) {
		t.Helper()
		args = append(args, "--address", c.srv.Address(), "--namespace", c.srv.Namespace())
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("$ temporal %s\n%s(exit %d)", strings.Join(args, " "), out, code)
		return string(out), code
	}
	expect := func(out string, code, want int, has ...string) {
		t.Helper()
		if code != want {
			t.Fatalf("exit %d, want %d", code, want)
		}
		for _, h := range has {
			if !strings.Contains(out, h) {
				t.Fatalf("the output has no %q", h)
			}
		}
	}
	out, code := temporalCLI("workflow", "start", "--type", "RunInEnvironment", "--task-queue", "hostfork", "--workflow-id", "build-42",
		"--input", `{"spec":{"lifetime":{"max_runtime":"30m"}},"commands":[{"argv":["sh","-c","echo hello"]}]}`)
	expect(out, code, 0, "build-42")
	out, code = temporalCLI("workflow", "result", "--workflow-id", "build-42")
	expect(out, code, 0, "COMPLETED", `"exit_status":0`)
	out, code = temporalCLI("workflow", "execute", "--type", "RunInEnvironment", "--task-queue", "hostfork",
		"--workflow-id", "build-43", "--input", `{"commands":[{"argv":["sh","-c","exit 3"]}]}`)
	expect(out, code, 1, "FAILED", `exited with status 3`)
	out, code = temporalCLI("workflow", "list", "--query", `WorkflowType="RunInEnvironment" AND ExecutionStatus="Failed"`)
	expect(out, code, 0, "build-43")
	if strings.Contains(out, "build-42") {
		t.Fatal("the completed workflow is listed as failed")
	}
	out, code = temporalCLI("workflow", "describe", "--workflow-id", "build-43")
	expect(out, code, 0, "FAILED")
	out, code = temporalCLI("workflow", "result", "--workflow-id", "build-43", "-o", "json")
	expect(out, code, 1)
	var res struct {
		Status     string `json:"status"`
		CloseEvent struct {
			Attrs struct {
				Failure struct {
					Info struct {
						Type         string        `json:"type"`
						NonRetryable bool          `json:"nonRetryable"`
						Details      []flow.Result `json:"details"`
					} `json:"applicationFailureInfo"`
				} `json:"failure"`
			} `json:"workflowExecutionFailedEventAttributes"`
		} `json:"closeEvent"`
	}
	// The JSON, then the CLI's own log line on stderr.
	if err := json.NewDecoder(strings.NewReader(out[strings.Index(out, "{"):])).Decode(&res); err != nil {
		t.Fatal(err)
	}
	info := res.CloseEvent.Attrs.Failure.Info
	if res.Status != "FAILED" || info.Type != flow.ErrCommandFailed || !info.NonRetryable || len(info.Details) != 1 ||
		info.Details[0].ExitStatus != 3 || len(info.Details[0].Commands) != 1 {
		t.Fatalf("result -o json: %+v", res)
	}
	out, code = temporalCLI("workflow", "start", "--type", "RunInEnvironment", "--task-queue", "hostfork", "--workflow-id", "build-44",
		"--input", `{"commands":[{"argv":["sleep","1000"]}]}`)
	expect(out, code, 0, "build-44")
	n, rec, tree := c.liveCommand(ctx, "build-44", 1)
	out, code = temporalCLI("workflow", "cancel", "--workflow-id", "build-44")
	expect(out, code, 0)
	out, code = temporalCLI("workflow", "result", "--workflow-id", "build-44")
	expect(out, code, 1, "CANCELED")
	for _, p := range tree {
		if p.alive() {
			t.Errorf("process %d of the cancelled command is still running", p.pid)
		}
	}
	if _, got, err := n.h.Status(ctx, rec.ID); err != nil || got.StopReason != hostfork.ReasonCancelled {
		t.Fatalf("the cancelled command's record: %+v (%v)", got, err)
	}
}

// checkDocQuotes checks that docs/temporal.md quotes the example part of
// the TypeScript file word for word.
func checkDocQuotes(t *testing.T, file string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(src), "(docs/temporal.md quotes from here to \"end of the example\") ---\n")
	example, _, ok2 := strings.Cut(rest, "// --- end of the example ---")
	if !ok1 || !ok2 {
		t.Fatalf("%s: no example markers", file)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "temporal.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```ts\n"+example+"```\n") {
		t.Errorf("docs/temporal.md does not quote the example of %s word for word, as a ```ts block", file)
	}
}
