package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// hostforkCLI runs this test binary as the hostfork command against a
// private store and a private cgroup parent, both removed (after killing
// whatever is left) when the test ends, also when it fails.
type hostforkCLI struct {
	t      *testing.T
	exe    string
	root   string
	parent string // cgroup parent
	mount  string // cgroup2 mount
	mark   string // inherited by every process started through this CLI
}

func newCLI(t *testing.T) *hostforkCLI {
	t.Helper()
	testutil.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := cgroup.FindMount()
	if err != nil {
		testutil.Skip(t, "no writable cgroup2 mount: "+err.Error())
	}
	// Registered first, so removed last: after every process is gone.
	root := filepath.Join(t.TempDir(), "store")
	parent := filepath.Join(m.Path, testutil.UniqueName("hostfork-test"))
	if _, err := cgroup.Create(parent); err != nil {
		testutil.Skip(t, "can't create a test cgroup: "+err.Error())
	}
	c := &hostforkCLI{t: t, exe: exe, root: root, parent: parent, mount: m.Path, mark: testutil.UniqueName("hostfork-test")}
	t.Cleanup(func() {
		killMarked(c.mark)
		if err := removeCgroupTree(parent); err != nil {
			t.Error(err)
		}
	})
	return c
}

// with returns the same CLI reporting to t (a subtest).
func (c *hostforkCLI) with(t *testing.T) *hostforkCLI {
	d := *c
	d.t = t
	return &d
}

// command returns an unstarted hostfork invocation.
func (c *hostforkCLI) command(args ...string) *exec.Cmd {
	cmd := &exec.Cmd{Path: c.exe, Args: append([]string{"hostfork"}, args...)}
	cmd.Env = append(os.Environ(),
		"HOSTFORK_ROOT="+c.root,
		"HOSTFORK_CGROUP_PARENT="+c.parent,
		markVar+"="+c.mark,
	)
	return cmd
}

type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// run runs hostfork to completion.
func (c *hostforkCLI) run(args ...string) cliResult {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			c.t.Fatalf("hostfork %s: %v", strings.Join(args, " "), err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// mustRun runs hostfork and requires exit status 0.
func (c *hostforkCLI) mustRun(args ...string) cliResult {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("hostfork %s: %v", strings.Join(args, " "), r)
	}
	return r
}

// psRow is one row of ps --json.
type psRow struct {
	ID         string            `json:"id"`
	Env        string            `json:"env"`
	Purpose    string            `json:"purpose"`
	Labels     map[string]string `json:"labels"`
	Argv       []string          `json:"argv"`
	StdoutPath string            `json:"stdout_path"`
	StderrPath string            `json:"stderr_path"`
	State      string            `json:"state"`
	Stoppable  bool              `json:"stoppable"`
	PID        int               `json:"pid"`
	ExitCode   *int              `json:"exit_code"`
	Signal     *int              `json:"signal"`
	StopReason string            `json:"stop_reason"`
}

func (c *hostforkCLI) ps(all bool) []psRow {
	c.t.Helper()
	args := []string{"ps", "--json"}
	if all {
		args = append(args, "--all")
	}
	r := c.mustRun(args...)
	var rows []psRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		c.t.Fatalf("ps --json: %v\n%s", err, r.stdout)
	}
	return rows
}

// status returns status --json of a command or environment as a map.
func (c *hostforkCLI) status(id string) map[string]any {
	c.t.Helper()
	r := c.mustRun("status", "--json", id)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		c.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return m
}

// exec runs a writing SQL statement on the registry, as a tampering or
// buggy writer would.
func (c *hostforkCLI) exec(q string, args ...any) {
	c.t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(c.root, "registry.sqlite")+"?_busy_timeout=30000")
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(q, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		c.t.Fatalf("%s: %d rows changed, want 1", q, n)
	}
}

// query runs a read-only SQL query on the registry; rows are lines,
// columns are joined by '|'.
func (c *hostforkCLI) query(q string) string {
	c.t.Helper()
	out, err := queryRegistry(c.root, q)
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// procs lists the processes under the test's cgroup parent.
func (c *hostforkCLI) procs() []int {
	c.t.Helper()
	pids, err := cgroup.Open(c.parent).AllProcs()
	if err != nil {
		c.t.Fatal(err)
	}
	return pids
}

// cgroupOf is the absolute cgroup2 directory of pid ("" if it is gone).
func (c *hostforkCLI) cgroupOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(c.mount, strings.TrimSpace(rel))
		}
	}
	return ""
}

// eventually polls cond until it returns "" (success) or the safety bound
// passes, then fails with the last complaint. The bound is for a broken
// run, not a performance expectation.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits until path has non-empty content and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var s string
	eventually(t, "waiting for "+path, func() string {
		b, _ := os.ReadFile(path)
		s = strings.TrimSpace(string(b))
		if s == "" {
			return "still empty"
		}
		return ""
	})
	return s
}

// waitPID reads a PID written to path by a workload.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	s := waitFile(t, path)
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// startTime is field 22 of /proc/PID/stat (0 if the process is gone).
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// sameProcessAlive reports whether the process pid with start time st
// still exists and is not a zombie.
func sameProcessAlive(pid int, st uint64) bool {
	return processAlive(pid) && startTime(pid) == st
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
