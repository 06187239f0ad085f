package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A record edited so that its guardian and workload PIDs name another live
// process (as after PID reuse) is never signalled: not by ps, status, logs,
// stop of the command or stop of its environment.
func TestIdentityMismatchIsNeverSignalled(t *testing.T) {
	for _, tc := range []struct {
		name string
		tier string
		// replaceReceipt swaps the receipt for a copy (new inode), so it no
		// longer verifies and the record is judged on identities alone.
		replaceReceipt bool
		// forgeStart also copies the stranger's start time into the record:
		// a complete, valid identity of a process that hostfork never
		// started and that is outside the command's cgroup.
		forgeStart bool
	}{
		{name: "cgroup2", tier: "cgroup2"},
		{name: "cgroup2-no-receipt", tier: "cgroup2", replaceReceipt: true},
		{name: "subreaper-no-receipt", tier: "subreaper", replaceReceipt: true},
		{name: "cgroup2-forged-identity", tier: "cgroup2", replaceReceipt: true, forgeStart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			// A command that ends on its own, so that the record is final
			// without any stop.
			env := firstLine(c.mustRun("run", "--tier", tc.tier, "--detach", "--ttl", "1m", "--", "true").stdout)
			var id string
			eventually(t, "the command's record becomes final", func() string {
				rows := c.ps(true)
				if len(rows) != 1 || rows[0].State != "exited" {
					return fmt.Sprintf("ps --all: %+v", rows)
				}
				id = rows[0].ID
				return ""
			})

			// A process hostfork knows nothing about, started in a later
			// clock tick than the command's guardian: a start time counts
			// ticks (10 ms), and a run and a ps can fit in one, which would
			// make the edited identity below a true one.
			recorded := c.query("select guardian_start || ' ' || workload_start from commands where id = '" + id + "'")
			var stranger *exec.Cmd
			var pid int
			var st uint64
			for try := 0; ; try++ {
				stranger = exec.Command("sleep", "300")
				if err := stranger.Start(); err != nil {
					t.Fatal(err)
				}
				pid = stranger.Process.Pid
				st = startTime(pid)
				if !slices.Contains(strings.Fields(recorded), fmt.Sprint(st)) || try == 10 {
					break
				}
				_ = stranger.Process.Kill()
				_ = stranger.Wait()
				time.Sleep(10 * time.Millisecond)
			}
			t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })

			if tc.replaceReceipt {
				dir := c.query("select dir from commands where id = '" + id + "'")
				receipt := filepath.Join(dir, "receipt")
				b, err := os.ReadFile(receipt)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(receipt, receipt+".orig"); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(receipt, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			set := fmt.Sprintf(`stop_reason = '', tree_exited_at = NULL, tree_evidence = '',
				tree_state = 'live', leader_state = 'live', guardian_pid = %d, workload_pid = %d`, pid, pid)
			if tc.forgeStart {
				set += fmt.Sprintf(`, guardian_start = %d, workload_start = %d`, st, st)
			}
			c.exec("update commands set rev = rev + 1, state = 'running', "+set+" where id = ?", id)

			check := func(after string) {
				t.Helper()
				if !sameProcessAlive(pid, st) {
					t.Fatalf("after %s, the stranger %d was signalled", after, pid)
				}
			}
			rows := c.ps(false)
			check("ps")
			for _, r := range rows {
				if r.PID == pid && !tc.forgeStart {
					t.Errorf("ps shows the stranger's PID as the command's: %+v", r)
				}
			}
			c.ps(true)
			check("ps --all")
			c.status(id)
			check("status")
			c.run("logs", id)
			check("logs")
			stop := c.run("stop", id)
			check("stop of the command")
			stopEnv := c.run("stop", env)
			check("stop of the environment")
			rows = c.ps(true)
			check("ps --all after the stops")
			rec := c.status(id)
			t.Logf("stop: %v", stop)
			t.Logf("stop env: %v", stopEnv)
			t.Logf("record: record_state %v, tree_state %v (%v), leader_state %v, stop_reason %q, guardian %v, workload %v; ps state %s",
				rec["record_state"], rec["tree_state"], rec["tree_evidence"], rec["leader_state"], rec["stop_reason"], rec["guardian"], rec["workload"], rows[0].State)
			if !tc.forgeStart && rows[0].State == "alive" {
				t.Errorf("with a mismatched identity, ps calls the command alive")
			}
		})
	}
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
