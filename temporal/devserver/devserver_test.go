package devserver_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/habemus-papadum/hostfork/temporal/devserver"
)

const (
	taskQueue  = "devserver-test"
	signalName = "go"
)

// Hello is the test's one activity.
func Hello(ctx context.Context, name string) (string, error) {
	activity.GetLogger(ctx).Info("hello activity", "name", name)
	return "hello, " + name, nil
}

func activityCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
}

// Greet runs Hello once.
func Greet(ctx workflow.Context, name string) (string, error) {
	var out string
	err := workflow.ExecuteActivity(activityCtx(ctx), Hello, name).Get(ctx, &out)
	return out, err
}

// AwaitSignal blocks until the "go" signal, then runs Hello with its value.
func AwaitSignal(ctx workflow.Context) (string, error) {
	var name string
	workflow.GetSignalChannel(ctx, signalName).Receive(ctx, &name)
	var out string
	err := workflow.ExecuteActivity(activityCtx(ctx), Hello, name).Get(ctx, &out)
	return out, err
}

// Sleep blocks on a durable timer, then runs Hello.
func Sleep(ctx workflow.Context, d time.Duration) (string, error) {
	if err := workflow.Sleep(ctx, d); err != nil {
		return "", err
	}
	var out string
	err := workflow.ExecuteActivity(activityCtx(ctx), Hello, "timer").Get(ctx, &out)
	return out, err
}

// testLogger writes the server's, client's and worker's logs to a file in
// dir and prints the file's tail when the test fails. It is registered
// after dir, so it runs before dir is removed.
func testLogger(t *testing.T, dir string) *slog.Logger {
	t.Helper()
	path := filepath.Join(dir, "temporal.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if !t.Failed() {
			return
		}
		r, err := os.Open(path)
		if err != nil {
			return
		}
		defer r.Close()
		var lines []string
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		for _, l := range lines {
			t.Log(l)
		}
	})
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startServer starts a server and stops it when the test ends. srv is
// updated in place by restarts, so the cleanup stops the latest one.
func startServer(t *testing.T, ctx context.Context, srv **devserver.Server, opts devserver.Options) {
	t.Helper()
	began := time.Now()
	s, err := devserver.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server ready on %s in %v (db %q)", s.Address(), time.Since(began).Round(time.Millisecond), opts.DBFile)
	if *srv == nil {
		t.Cleanup(func() {
			if err := (*srv).Stop(); err != nil {
				t.Errorf("stop server: %v", err)
			}
		})
	}
	*srv = s
}

func TestInMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var srv *devserver.Server
	startServer(t, ctx, &srv, devserver.Options{Logger: testLogger(t, t.TempDir())})
	if srv.Namespace() != devserver.DefaultNamespace || srv.DBFile() != "" {
		t.Fatalf("namespace %q, db %q", srv.Namespace(), srv.DBFile())
	}
	host, _, err := net.SplitHostPort(srv.Address())
	if err != nil || host != devserver.DefaultHost {
		t.Fatalf("address %q: %v", srv.Address(), err)
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetNamespaceInfo().GetState() != enumspb.NAMESPACE_STATE_REGISTERED {
		t.Fatalf("namespace state %v", resp.GetNamespaceInfo().GetState())
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil { // second Stop is a no-op
		t.Fatal(err)
	}
}

func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	srv, err := devserver.Start(context.Background(), devserver.Options{Port: port})
	if err == nil {
		srv.Stop()
		t.Fatalf("Start on a taken port %d succeeded", port)
	}
}

// TestWorkflowAcrossRestart runs a workflow with one activity, then stops
// the server while two workflows wait (one on a signal, one on a timer),
// starts a new server on the same SQLite file and port, and checks that the
// same client and worker, kept running throughout, see both complete.
func TestWorkflowAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	logger := testLogger(t, dir)
	opts := devserver.Options{
		DBFile:    filepath.Join(dir, "temporal.db"),
		Namespace: "hostfork-test",
		Logger:    logger.With("component", "server"),
	}
	var srv *devserver.Server
	startServer(t, ctx, &srv, opts)

	c, err := client.DialContext(ctx, client.Options{
		HostPort:  srv.Address(),
		Namespace: opts.Namespace,
		Logger:    sdklog.NewStructuredLogger(logger.With("component", "client")),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(Greet)
	w.RegisterWorkflow(AwaitSignal)
	w.RegisterWorkflow(Sleep)
	w.RegisterActivity(Hello)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop) // runs before c.Close and the server's Stop

	// 1. A trivial workflow with one activity.
	began := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: taskQueue}, Greet, "hostfork")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got != "hello, hostfork" {
		t.Fatalf("Greet = %q", got)
	}
	t.Logf("Greet workflow took %v", time.Since(began).Round(time.Millisecond))

	// 2. Two workflows that are blocked when the server goes away.
	const sleep = 5 * time.Second
	sigRun, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "await-signal", TaskQueue: taskQueue}, AwaitSignal)
	if err != nil {
		t.Fatal(err)
	}
	sleepRun, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "sleep", TaskQueue: taskQueue}, Sleep, sleep)
	if err != nil {
		t.Fatal(err)
	}
	sleepStarted := time.Now()
	waitForEvent(t, ctx, c, sigRun, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
	waitForEvent(t, ctx, c, sleepRun, enumspb.EVENT_TYPE_TIMER_STARTED)

	// 3. Restart the server on the same file and port.
	began = time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server stopped in %v", time.Since(began).Round(time.Millisecond))
	_, port, _ := net.SplitHostPort(srv.Address())
	opts.Port, _ = strconv.Atoi(port)
	startServer(t, ctx, &srv, opts)

	// 4. Both complete after the restart.
	began = time.Now()
	if err := c.SignalWorkflow(ctx, sigRun.GetID(), "", signalName, "after restart"); err != nil {
		t.Fatal(err)
	}
	if err := sigRun.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got != "hello, after restart" {
		t.Fatalf("AwaitSignal = %q", got)
	}
	t.Logf("signalled workflow completed %v after the restart", time.Since(began).Round(time.Millisecond))
	if err := sleepRun.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got != "hello, timer" {
		t.Fatalf("Sleep = %q", got)
	}
	if d := time.Since(sleepStarted); d < sleep {
		t.Fatalf("Sleep workflow completed after %v, before its %v timer", d, sleep)
	}
	t.Logf("timer workflow completed %v after it started", time.Since(sleepStarted).Round(time.Millisecond))
}

// waitForEvent polls a workflow's history until an event of the given type
// is in it.
func waitForEvent(t *testing.T, ctx context.Context, c client.Client, run client.WorkflowRun, want enumspb.EventType) {
	t.Helper()
	for {
		it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetEventType() == want {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(errors.Join(ctx.Err(), errors.New("no "+want.String()+" in "+run.GetID())))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
