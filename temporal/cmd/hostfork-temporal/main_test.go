package main

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// The test binary doubles as the command: with this variable set it runs
// main() instead of the tests, so the test drives a real process without a
// second build of the (large) binary.
const runMainEnv = "HOSTFORK_TEMPORAL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"hostfork-temporal"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDevServerCommand starts `hostfork-temporal dev-server` as a process,
// reads its address, checks the namespace through it, and stops it with
// SIGINT, then SIGTERM on a second run over the same database.
func TestDevServerCommand(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "dev.db")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			runDevServer(t, sig, "--db", db, "--namespace", "ns-cmd", "--log-file", filepath.Join(dir, "server.log"))
		})
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatal(err)
	}
}

func runDevServer(t *testing.T, sig syscall.Signal, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(os.Args[0], append([]string{"dev-server"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		// On any failure path, end the process we started, by its PID.
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var addr string
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("dev-server exited without printing its address; stderr: %s", stderr.String())
		}
		var found bool
		addr, found = strings.CutPrefix(line, "listening on ")
		if !found {
			t.Fatalf("first line %q, want \"listening on HOST:PORT\"", line)
		}
	case <-ctx.Done():
		t.Fatalf("no address within a minute; stderr: %s", stderr.String())
	}
	t.Logf("dev-server listening on %s %v after exec", addr, time.Since(began).Round(time.Millisecond))

	c, err := client.DialContext(ctx, client.Options{
		HostPort:  addr,
		Namespace: "ns-cmd",
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "ns-cmd"})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred check
		if err != nil {
			t.Fatalf("dev-server after %v: %v; stderr: %s", sig, err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("dev-server did not exit after %v", sig)
	}
	for line := range lines {
		t.Errorf("unexpected output after the address: %q", line)
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr not empty: %s", stderr.String())
	}
}
