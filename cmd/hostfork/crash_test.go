package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kill -9 of a foreground run (default owner exit: stop): the guardian
// notices that its owner is gone and stops the whole tree, setsid daemon
// included; the record says owner-exit and the tree exited.
func TestKill9ForegroundRunStopsTree(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	daemonPID := filepath.Join(dir, "daemon.pid")
	leaderPID := filepath.Join(dir, "leader.pid")
	run := c.command("run", "--", "sh", "-c",
		"setsid sh -c 'echo $$ > "+daemonPID+"; exec sleep 300' & echo $$ > "+leaderPID+"; exec sleep 300")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	daemon := waitPID(t, daemonPID)
	leader := waitPID(t, leaderPID)
	daemonST, leaderST := startTime(daemon), startTime(leader)
	rows := c.ps(false)
	if len(rows) != 1 || rows[0].State != "alive" {
		t.Fatalf("before the kill, ps: %+v", rows)
	}
	id := rows[0].ID

	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = run.Wait()

	eventually(t, "after kill -9 of the caller, the tree is stopped", func() string {
		if pids := c.procs(); len(pids) > 0 {
			return fmt.Sprintf("processes left in the cgroup parent: %v", pids)
		}
		if rows := c.ps(false); len(rows) > 0 {
			return fmt.Sprintf("ps still lists: %+v", rows)
		}
		return ""
	})
	if sameProcessAlive(daemon, daemonST) || sameProcessAlive(leader, leaderST) {
		t.Fatalf("daemon %d or leader %d survived the owner's death", daemon, leader)
	}
	st := c.status(id)
	for k, want := range map[string]any{"stop_reason": "owner-exit", "tree_state": "exited", "leader_state": "exited", "record_state": "exited"} {
		if st[k] != want {
			t.Errorf("status %s = %v, want %v", k, st[k], want)
		}
	}
	rows = c.ps(true)
	if len(rows) != 1 || rows[0].State != "exited" || rows[0].StopReason != "owner-exit" {
		t.Fatalf("ps --all: %+v", rows)
	}
	// Nobody stopped the environment itself (its owner died): reap does,
	// and removes its cgroups.
	c.mustRun("reap")
	if env := c.status(rows[0].Env); env["state"] != "stopped" || env["stop_reason"] != "owner-exit" {
		t.Errorf("after reap, environment %s: state %v, stop reason %v", rows[0].Env, env["state"], env["stop_reason"])
	}
	if got := c.query("select count(*) from intents where kind = 'cgroup' and state in ('pending', 'created')"); got != "0" {
		t.Errorf("after reap, %s cgroup intents are still open", got)
	}
}

// kill -9 of run --until-stopped in the foreground: the command keeps
// running (its output still reaches the files), ps shows it alive, and
// stop ends it.
func TestKill9UntilStoppedKeepsRunning(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	trigger := filepath.Join(dir, "trigger")
	leaderPID := filepath.Join(dir, "leader.pid")
	run := c.command("run", "--until-stopped", "--", "sh", "-c",
		"echo $$ > "+leaderPID+"; echo before; while [ ! -e "+trigger+" ]; do sleep 0.01; done; echo after; exec sleep 300")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	leader := waitPID(t, leaderPID)
	leaderST := startTime(leader)
	rows := c.ps(false)
	if len(rows) != 1 {
		t.Fatalf("ps: %+v", rows)
	}
	row := rows[0]
	waitFile(t, row.StdoutPath)

	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = run.Wait()
	// Output written after the caller died still lands in the file.
	if err := writeFile(trigger, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "output after the caller's death", func() string {
		if s := readFile(row.StdoutPath); s != "before\nafter\n" {
			return fmt.Sprintf("stdout file is %q", s)
		}
		return ""
	})
	if !sameProcessAlive(leader, leaderST) {
		t.Fatal("the command died with its caller")
	}
	rows = c.ps(false)
	if len(rows) != 1 || rows[0].ID != row.ID || rows[0].State != "alive" || !rows[0].Stoppable {
		t.Fatalf("after the caller's death, ps: %+v", rows)
	}
	eventually(t, "status of the orphaned command", func() string {
		if st := c.status(row.ID); st["tree_state"] != "live" || st["leader_state"] != "live" {
			return fmt.Sprintf("tree %v leader %v", st["tree_state"], st["leader_state"])
		}
		return ""
	})

	r := c.mustRun("stop", row.ID)
	if !strings.Contains(r.stdout, "tree exited") {
		t.Errorf("stop: %v", r)
	}
	if sameProcessAlive(leader, leaderST) {
		t.Fatal("stop left the leader running")
	}
	if pids := c.procs(); len(pids) > 0 {
		t.Fatalf("processes left after stop: %v", pids)
	}
	if rows := c.ps(false); len(rows) > 0 {
		t.Fatalf("ps after stop: %+v", rows)
	}
	st := c.status(row.ID)
	if st["stop_reason"] != "user" || st["tree_state"] != "exited" {
		t.Fatalf("status after stop: stop_reason %v tree %v", st["stop_reason"], st["tree_state"])
	}
}

// SIGKILL of the launcher at random points during the launch never leaves
// a process that the registry does not account for: once the dust settles,
// every process in the cgroup parent belongs to a command that ps shows
// alive, and stop ends each of them. With owner exit "stop" (a foreground
// run) nothing may be left running at all.
func TestKill9DuringLaunch(t *testing.T) {
	iterations := 40
	if testing.Short() {
		iterations = 8
	}
	for _, mode := range []struct {
		name string
		args []string
		// survive: whether a command released before the kill keeps running.
		survive bool
	}{
		{"detach", []string{"run", "--detach", "--ttl", "1m", "--", "sh", "-c", "setsid sleep 300 & exec sleep 300"}, true},
		{"foreground", []string{"run", "--", "sh", "-c", "setsid sleep 300 & exec sleep 300"}, false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			c := newCLI(t)
			// Calibrate: the kill points must spread over the whole launch,
			// from exec of hostfork to its return, whatever this machine's
			// speed. The brief's 0-20 ms is covered as the low end.
			span := 20 * time.Millisecond
			for j := 0; j < 3; j++ {
				t0 := time.Now()
				if mode.survive {
					c.mustRun("run", "--detach", "--ttl", "1m", "--", "true")
				} else {
					c.mustRun("run", "--", "true")
				}
				span = max(span, time.Since(t0)*5/4)
			}
			outcomes := map[string]int{}
			for i := 0; i < iterations; i++ {
				before := len(c.ps(true))
				delay := time.Duration(rand.Int64N(int64(span)))
				run := c.command(mode.args...)
				if err := run.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(delay)
				_ = run.Process.Signal(syscall.SIGKILL)
				_ = run.Wait()

				var rows []psRow
				eventually(t, fmt.Sprintf("iteration %d (kill after %v)", i, delay), func() string {
					var msg string
					rows, msg = c.unaccounted()
					if msg == "" && !mode.survive {
						for _, r := range rows {
							if r.State != "exited" {
								msg = fmt.Sprintf("owner exit is stop, yet command %s is %s", r.ID, r.State)
							}
						}
					}
					return msg
				})
				switch {
				case len(rows) == before:
					outcomes["killed before the command was recorded"]++
				default:
					newest := rows[len(rows)-1]
					outcomes[newest.State+"/"+c.query("select state from commands where id = '"+newest.ID+"'")]++
				}
				for _, r := range rows {
					if r.State != "exited" {
						if res := c.run("stop", r.ID); res.code != 0 {
							t.Fatalf("stop %s (%s): %v", r.ID, r.State, res)
						}
					}
				}
				if pids := c.procs(); len(pids) > 0 {
					t.Fatalf("iteration %d: processes left after stopping every live command: %v", i, pids)
				}
			}
			t.Logf("%d kills within %v; outcome (ps state/record state) of each: %v", iterations, span, outcomes)
			// reap finishes what the killed launches left half-done: no
			// environment stays "creating", no intent stays pending, and
			// with owner exit "stop" every environment is stopped and its
			// cgroups are gone.
			t.Run("reap", func(t *testing.T) {
				c := c.with(t)
				reap := c.run("reap")
				if reap.code != 0 {
					t.Errorf("reap: %v", reap)
				}
				// An active (detached) environment settles its failed
				// launches' intents when it stops; any other is dangling.
				if got := c.query("select i.env_id, i.command_id, i.kind, i.target, e.state from intents i join envs e on e.id = i.env_id where i.state = 'pending' and e.state != 'active'"); got != "" {
					t.Errorf("after reap, intents are pending:\n%s", got)
				}
				if got := c.query("select count(*) from envs where state = 'creating'"); got != "0" {
					t.Errorf("after reap, %s environments are still creating; reap said:\n%s", got, reap.stdout)
				}
				if !mode.survive {
					if got := c.query("select id, state from envs where state not in ('stopped', 'failed')"); got != "" {
						t.Errorf("after reap, environments of dead owners are not stopped: %s", got)
					}
					if ents, _ := os.ReadDir(c.parent); slices.ContainsFunc(ents, os.DirEntry.IsDir) {
						t.Errorf("after reap, cgroups are left under %s", c.parent)
					}
				}
			})
		})
	}
}

// unaccounted lists the processes in the cgroup parent that no command
// shown alive by ps owns, and returns ps --all.
func (c *hostforkCLI) unaccounted() ([]psRow, string) {
	rows := c.ps(true)
	state := map[string]string{}
	for _, r := range rows {
		state[r.ID] = r.State
	}
	groups := map[string]string{} // command cgroup -> command id
	guardians := map[int]string{} // guardian pid -> command id
	for _, line := range strings.Split(c.query("select id, cgroup_path, guardian_pid from commands"), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			continue
		}
		if f[1] != "" {
			groups[f[1]] = f[0]
		}
		if pid, err := strconv.Atoi(f[2]); err == nil && pid > 0 {
			guardians[pid] = f[0]
		}
	}
	var bad []string
	for _, pid := range c.procs() {
		cg := c.cgroupOf(pid)
		if cg == "" {
			continue // exited meanwhile
		}
		owner := ""
		for path, id := range groups {
			if cg == path || strings.HasPrefix(cg, path+"/") {
				owner = id
			}
		}
		if id, ok := guardians[pid]; ok && filepath.Base(cg) == "guardians" {
			owner = id // a guardian lives in its environment's guardians group
		}
		if owner == "" || state[owner] != "alive" {
			bad = append(bad, fmt.Sprintf("pid %d in %s (command %q, ps state %q)", pid, strings.TrimPrefix(cg, c.parent), owner, state[owner]))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return rows, "unaccounted processes: " + strings.Join(bad, "; ")
	}
	return rows, ""
}
