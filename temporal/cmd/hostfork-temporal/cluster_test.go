package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/devserver"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// This file is the harness of the end-to-end tests: a real embedded
// Temporal server in the test process, and real `hostfork-temporal worker`
// processes (the test binary re-executed as main), each with its own store
// and its own cgroup parent.

// skipUnless skips the test with reason, or fails it under
// HOSTFORK_TEST_STRICT=1 (CI).
func skipUnless(t *testing.T, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("HOSTFORK_TEST_STRICT") == "1" {
		t.Fatalf("HOSTFORK_TEST_STRICT=1 and the test can't run: %s", reason)
	}
	t.Skip(reason)
}

// cgroup2Mount finds a writable cgroup2 mount: /sys/fs/cgroup on a unified
// host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() (string, error) {
	for _, p := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st syscall.Statfs_t
		if err := syscall.Statfs(p, &st); err == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			return p, nil
		}
	}
	return "", errors.New("no cgroup2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}

// testCgroup creates a unique cgroup2 group for one node's environments and
// removes it when the test ends, killing whatever is left inside first.
func testCgroup(t *testing.T, name string) string {
	t.Helper()
	m, err := cgroup2Mount()
	skipUnless(t, err == nil, fmt.Sprint(err))
	p := filepath.Join(m, fmt.Sprintf("hostfork-temporal-test-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(p, 0o755); err != nil {
		skipUnless(t, false, "can't create a test cgroup: "+err.Error())
	}
	t.Cleanup(func() { removeCgroup(t, p) })
	return p
}

// cgroupProcs lists the PIDs in p and every group below it.
func cgroupProcs(p string) []int {
	var pids []int
	_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

func removeCgroup(t *testing.T, p string) {
	if _, err := os.Stat(p); err != nil {
		return
	}
	if left := cgroupProcs(p); len(left) > 0 {
		t.Errorf("cleanup: processes left in %s: %v (killing them)", p, left)
		_ = os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0)
	}
	var dirs []string
	_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := len(dirs) - 1; i >= 0; i-- {
		for {
			err := syscall.Rmdir(dirs[i])
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				t.Errorf("cleanup: rmdir %s: %v", dirs[i], err)
				break
			}
			time.Sleep(20 * time.Millisecond) // a killed task is still leaving
		}
	}
}

// startTime is field 22 of /proc/PID/stat (0 when the process is gone).
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// proc is one process identity: PID and start time.
type proc struct {
	pid   int
	start uint64
}

func (p proc) alive() bool { return startTime(p.pid) == p.start }

func identities(pids []int) []proc {
	var out []proc
	for _, p := range pids {
		if s := startTime(p); s != 0 {
			out = append(out, proc{p, s})
		}
	}
	return out
}

// cluster is a server and the node workers of one test.
type cluster struct {
	t       *testing.T
	dir     string
	srvOpts devserver.Options
	srv     *devserver.Server
	c       client.Client
	logger  *slog.Logger
	nodes   map[string]*nodeProc
}

// nodeProc is one node: its store, its cgroup parent, its worker process.
type nodeProc struct {
	name, root, cgroup, log string
	h                       *hostfork.Host
	cmd                     *exec.Cmd
	exited                  chan struct{}
	waitErr                 error
	env                     []string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	skipUnless(t, os.Geteuid() == 0, "needs root (cgroup2 ownership tier, real worker processes)")
	if _, err := cgroup2Mount(); err != nil {
		skipUnless(t, false, err.Error())
	}
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, nodes: map[string]*nodeProc{}}
	logf, err := os.Create(filepath.Join(dir, "test.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.logger = slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			c.dumpLogs()
		}
	})
	c.srvOpts = devserver.Options{DBFile: filepath.Join(dir, "temporal.db"), Logger: c.logger.With("component", "server")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.srv, err = devserver.Start(ctx, c.srvOpts)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(c.srv.Address())
	c.srvOpts.Port, _ = strconv.Atoi(port)
	t.Cleanup(func() {
		if err := c.srv.Stop(); err != nil {
			t.Errorf("stopping the server: %v", err)
		}
	})
	c.c, err = client.DialContext(ctx, client.Options{HostPort: c.srv.Address(), Namespace: c.srv.Namespace(),
		Logger: sdklog.NewStructuredLogger(c.logger.With("component", "client"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.c.Close)
	return c
}

// restartServer stops the server, keeps it down for down, and starts it
// again on the same database file and port; it returns how long the
// server was away.
func (c *cluster) restartServer(down time.Duration) time.Duration {
	c.t.Helper()
	began := time.Now()
	if err := c.srv.Stop(); err != nil {
		c.t.Fatal(err)
	}
	time.Sleep(down) // the outage itself, not a synchronization
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, c.srvOpts)
	if err != nil {
		c.t.Fatal(err)
	}
	c.srv = srv
	return time.Since(began)
}

// node prepares a node's store (admission share 1.0, so this machine's
// cores give every node two slots) and cgroup parent, and starts its
// worker. env is added to the worker's environment.
func (c *cluster) node(name string, env ...string) *nodeProc {
	c.t.Helper()
	n := &nodeProc{name: name, root: filepath.Join(c.dir, "store-"+name), log: filepath.Join(c.dir, "worker-"+name+".log"), env: env}
	n.cgroup = testCgroup(c.t, name)
	ctx := context.Background()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: n.root, CgroupParent: n.cgroup})
	if err != nil {
		c.t.Fatal(err)
	}
	n.h = h
	c.t.Cleanup(func() { h.Close() })
	if err := os.WriteFile(filepath.Join(n.root, "config.yaml"), []byte("admission:\n  share: 1.0\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.nodes[name] = n
	c.start(n)
	return n
}

// start starts (or restarts) a node's worker and waits for "ready".
func (c *cluster) start(n *nodeProc) {
	c.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(exe, "worker", "--address", c.srv.Address(), "--namespace", c.srv.Namespace(),
		"--node", n.name, "--root", n.root)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "HOSTFORK_CGROUP_PARENT="+n.cgroup)
	cmd.Env = append(cmd.Env, n.env...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	logf.Close()
	n.cmd, n.exited = cmd, make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		var once sync.Once
		for sc.Scan() {
			if sc.Text() == "worker "+n.name+" ready" {
				once.Do(func() { close(ready) })
			}
		}
		n.waitErr = cmd.Wait()
		close(n.exited)
	}()
	c.t.Cleanup(func() { n.stop(c.t) })
	select {
	case <-ready:
	case <-n.exited:
		c.t.Fatalf("worker %s exited before it was ready: %v (log %s)", n.name, n.waitErr, n.log)
	case <-time.After(time.Minute):
		c.t.Fatalf("worker %s not ready within a minute", n.name)
	}
}

// stop ends the worker this test started, by its PID: SIGTERM, then
// SIGKILL after 15 s. It is a no-op once the process is gone.
func (n *nodeProc) stop(t *testing.T) {
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("worker %s ignored SIGTERM for 15 s; killing it", n.name)
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// kill SIGKILLs the worker and waits for it to be gone.
func (n *nodeProc) kill(t *testing.T) {
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.exited
}

func (c *cluster) dumpLogs() {
	for _, p := range append([]string{filepath.Join(c.dir, "test.log")}, c.workerLogs()...) {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		c.t.Logf("--- %s (last %d lines)", filepath.Base(p), len(lines))
		for _, l := range lines {
			c.t.Log(l)
		}
	}
}

// logText is the text of every worker's log.
func (c *cluster) logText() string {
	var all strings.Builder
	for _, p := range c.workerLogs() {
		b, _ := os.ReadFile(p)
		all.Write(b)
	}
	return all.String()
}

func (c *cluster) workerLogs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.log)
	}
	return out
}

// submit starts RunInEnvironment.
func (c *cluster) submit(ctx context.Context, id string, req flow.Request) client.WorkflowRun {
	c.t.Helper()
	run, err := c.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: flow.SharedQueue}, flow.WorkflowRunInEnvironment, req)
	if err != nil {
		c.t.Fatal(err)
	}
	return run
}

// envsOf lists the environments a workflow made on a node.
func (n *nodeProc) envsOf(t *testing.T, wid string) []hostfork.EnvRecord {
	t.Helper()
	envs, err := n.h.Envs(context.Background(), hostfork.EnvFilter{Labels: hostfork.Selector{flow.LabelWorkflow + "=" + wid}, WithCommands: true})
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// liveCommand waits until a command of the workflow runs on some node and
// its tree has at least want processes; it returns the node, the record
// and the tree's processes.
func (c *cluster) liveCommand(ctx context.Context, wid string, want int) (*nodeProc, hostfork.CommandRecord, []proc) {
	c.t.Helper()
	for {
		for _, n := range c.nodes {
			cmds, err := n.h.Commands(ctx, hostfork.CommandFilter{Labels: hostfork.Selector{flow.LabelWorkflow + "=" + wid}, Live: true})
			if err != nil {
				c.t.Fatal(err)
			}
			for _, rec := range cmds {
				if rec.CgroupPath == "" {
					continue
				}
				if ps := identities(cgroupProcs(rec.CgroupPath)); len(ps) >= want {
					return n, rec, ps
				}
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no live command of %s with %d processes: %v", wid, want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
