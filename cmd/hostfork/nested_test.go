package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// The guardian's own stops (idle here; deadline and timeout share the C
// tree stop) reach a member in a nested cgroup below the command's group:
// it gets SIGTERM first, within the grace, and is killed after it. The
// foreground run says hostfork ended it (124, one line).
func TestGuardianIdleStopReachesNestedCgroup(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	mark := filepath.Join(dir, "mark")
	pidFile := filepath.Join(dir, "nested.pid")
	// The workload makes a nested group in its own cgroup2 group and moves
	// a TERM-trapping shell into it; then nothing writes any output.
	script := `cg=$(sed -n 's/^0:://p' /proc/self/cgroup); m=$(awk '$9 == "cgroup2" {print $5; exit}' /proc/self/mountinfo)
mkdir "$m$cg/nested" || exit 90
sh -c 'echo $$ > "$0/cgroup.procs" && echo $$ > ` + pidFile + ` && trap "echo got-term > ` + mark + `" TERM && while :; do sleep 0.05; done' "$m$cg/nested" &
wait`
	r := c.run("run", "--idle-timeout", "1s", "--grace", "2s", "--", "sh", "-c", script)
	// The workload's shell may report its killed job ("Terminated");
	// hostfork's own words are one line.
	if r.code != 124 || strings.Count("\n"+r.stderr, "\nhostfork: ") != 1 || !strings.Contains(r.stderr, "hostfork: command") || !strings.Contains(r.stderr, "idle") {
		t.Fatalf("run: %v; want 124 and one line naming the idle timeout", r)
	}
	if got := strings.TrimSpace(readFile(mark)); got != "got-term" {
		t.Errorf("the nested member did not get SIGTERM before the kill (mark %q)", got)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(pidFile)))
	if err != nil {
		t.Fatalf("the nested member's pid: %v", err)
	}
	if st, err := linux.ReadStat(pid); err == nil && st.State != 'Z' {
		t.Errorf("the nested member %d is still running (state %c)", pid, st.State)
	}
	rows := c.ps(true)
	if len(rows) != 1 {
		t.Fatalf("ps --all: %+v", rows)
	}
	st := c.status(rows[0].ID)
	if st["stop_reason"] != "idle" || st["tree_state"] != "exited" || st["stopped_by_hostfork"] != true {
		t.Errorf("record: stop_reason %v, tree_state %v, stopped_by_hostfork %v; want idle, exited, true", st["stop_reason"], st["tree_state"], st["stopped_by_hostfork"])
	}
	if pids := c.procs(); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}
