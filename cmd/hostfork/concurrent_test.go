package main

import (
	"strconv"
	"sync"
	"testing"
)

// 100 concurrent runs against one store: all succeed, all are recorded,
// none is lost, and no caller reports anything (such as "database is
// locked") on its stderr.
func TestConcurrentRuns(t *testing.T) {
	const n = 100
	c := newCLI(t)
	// The store is created by the first of them too: no warm-up.
	results := make([]cliResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.run("run", "--label", "i="+strconv.Itoa(i), "--", "true")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 || r.stderr != "" || r.stdout != "" {
			t.Errorf("run %d: %v", i, r)
		}
	}
	rows := c.ps(true)
	if len(rows) != n {
		t.Fatalf("ps --all lists %d commands, want %d", len(rows), n)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != 0 {
			t.Errorf("command %s: state %s exit %v", r.ID, r.State, r.ExitCode)
		}
		// true leaves nothing behind: nobody stopped it, although run
		// stops its environment once the leader has exited.
		if r.StopReason != "" {
			t.Errorf("command %s exited on its own, yet its stop reason is %q", r.ID, r.StopReason)
		}
		seen[r.Labels["i"]] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct runs recorded, want %d", len(seen), n)
	}
	if got := c.query("select count(*) from intents where state = 'pending'"); got != "0" {
		t.Errorf("%s pending intents", got)
	}
	if got := c.query("select state, count(*) from envs group by state"); got != "stopped|100" {
		t.Errorf("environments by state: %s", got)
	}
	if pids := c.procs(); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}
