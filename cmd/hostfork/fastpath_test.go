package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// The fast path's durability budget (issue 11), counted, not timed: a
// `run -- /bin/true` on a warm store makes three commits — the
// reservation, the guardian's registration, the result — and three syncs
// of the registry's WAL, no other (no directory sync, no checkpoint on
// exit). The fault matrix crashes between all three.
func TestRunFsyncBudget(t *testing.T) {
	c := newCLI(t)
	c.mustRun("run", "--", "/bin/true") // the store, its registry and WAL exist now
	checkSyncBudget(t, c, 3, "run", "--", "/bin/true")
}

// An exec into an existing environment makes two durable commits
// (decision 56): its reservation registers the guardian, started before it
// with its files unnamed, and the result; two fsyncs of the WAL.
func TestExecFsyncBudget(t *testing.T) {
	c := newCLI(t)
	env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
	t.Cleanup(func() { c.run("stop", env) })
	c.mustRun("exec", env, "--", "/bin/true")
	checkSyncBudget(t, c, 2, "exec", env, "--", "/bin/true")
}

// After reap (or gc) checkpoints the WAL, the runs of the next processes
// keep to the budget and write the WAL in place (decision 73): each
// process rebuilds the WAL's index from the file, so a restart noted only
// in the index would be lost, and they would append to the checkpointed
// frames, grow the file and copy them into the database a second time
// (one sync of the database more).
func TestSyncBudgetAfterReap(t *testing.T) {
	c := newCLI(t)
	for i := 0; i < 3; i++ {
		c.mustRun("run", "--", "/bin/true")
	}
	c.mustRun("reap")
	wal := filepath.Join(c.root, "registry.sqlite-wal")
	st, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		checkSyncBudget(t, c, 3, "run", "--", "/bin/true")
	}
	after, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != st.Size() {
		t.Errorf("the WAL grew from %d to %d bytes over three runs after reap: they appended instead of writing it from its start", st.Size(), after.Size())
	}
}

// A detached run keeps to the budget too: the reservation, the
// registration, and the workload's identity recorded as the call leaves
// (the result is its guardian's to record).
func TestDetachedRunSyncBudget(t *testing.T) {
	c := newCLI(t)
	c.mustRun("run", "--", "/bin/true")
	// A command that outlives the call: its result is not recorded by it.
	t.Cleanup(func() {
		for _, r := range c.ps(true) {
			c.run("stop", "--grace", "0s", r.ID)
		}
	})
	// Only hostfork's own syncs: strace lets go of the guardian at its
	// exec, so it doesn't wait for the detached command either.
	syncTraceOpts = []string{"--detach-on=execve"}
	defer func() { syncTraceOpts = nil }()
	checkSyncBudget(t, c, 3, "run", "--detach", "--ttl", "1m", "--", "sleep", "60")
}

// syncTraceOpts are extra strace options for checkSyncBudget.
var syncTraceOpts []string

// checkSyncBudget runs hostfork with args under strace and fails if it
// makes more than max syncs, any sync other than one of the registry's
// WAL, or none. It returns the number of syncs.
func checkSyncBudget(t *testing.T, c *hostforkCLI, max int, args ...string) int {
	t.Helper()
	syncs := traceSyncs(t, c, args...)
	var wal []string
	for _, s := range syncs {
		// The WAL only: no directory (the VFS opens an existing WAL
		// without CREATE, decision 48), no database (no checkpoint on
		// exit). fsync, or fdatasync where SQLite is built with
		// HAVE_FDATASYNC.
		if (strings.HasPrefix(s, "fsync ") || strings.HasPrefix(s, "fdatasync ")) && strings.HasSuffix(s, "registry.sqlite-wal") {
			wal = append(wal, s)
		}
	}
	t.Logf("syncs of one %s: %q", args[0], syncs)
	if len(syncs) > max {
		t.Errorf("one %s made %d syncs, want at most %d (its ledger commits): %q", args[0], len(syncs), max, syncs)
	}
	if len(wal) != len(syncs) {
		t.Errorf("a sync other than one of the registry's WAL: %q", syncs)
	}
	if len(wal) == 0 {
		t.Errorf("no commit reached the disk (the records must be durable before %s returns)", args[0])
	}
	return len(syncs)
}

// traceSyncs runs hostfork with args under strace and returns its syncs,
// each as the call's name and the path synced.
func traceSyncs(t *testing.T, c *hostforkCLI, args ...string) []string {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		testutil.Skip(t, "strace is not installed (apt-get install strace)")
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	// The test binary is hostfork when its argv[0] says so (testscript).
	exe := filepath.Join(dir, "hostfork")
	if err := os.Symlink(c.exe, exe); err != nil {
		t.Fatal(err)
	}
	cmd := c.command(args...)
	sargs := append([]string{"strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs,sync", "-o", trace}, syncTraceOpts...)
	cmd.Args = append(sargs, append([]string{exe}, cmd.Args[1:]...)...)
	cmd.Path = strace
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace hostfork %s: %v: %s", args[0], err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`(fsync|fdatasync|sync_file_range|syncfs|sync)\((\d+)<([^>]*)>`)
	var syncs []string
	for _, line := range strings.Split(string(b), "\n") {
		if m := call.FindStringSubmatch(line); m != nil {
			syncs = append(syncs, m[1]+" "+m[3])
		}
	}
	return syncs
}

// In a store in steady use, SQLite's automatic checkpoint (decision 55)
// comes about every sixth run and costs that run two or three syncs more:
// the WAL before the copy, the database after it, and the WAL's new
// header when a later commit of the run restarts it. When the commit that
// checkpointed was the run's last, the restart is lost with the process's
// WAL index, and the next run checkpoints the same frames again (decision
// 73).
func TestSteadyStoreSyncs(t *testing.T) {
	c := newCLI(t)
	for i := 0; i < 8; i++ {
		c.mustRun("run", "--", "/bin/true")
	}
	const runs = 30
	dbSyncs := 0
	var counts []int
	for i := 0; i < runs; i++ {
		syncs := traceSyncs(t, c, "run", "--", "/bin/true")
		counts = append(counts, len(syncs))
		for _, s := range syncs {
			if strings.HasSuffix(s, "registry.sqlite") {
				dbSyncs++
			}
		}
		if len(syncs) > 6 {
			t.Errorf("run %d made %d syncs: %q", i, len(syncs), syncs)
		}
	}
	t.Logf("syncs of %d runs: %v", runs, counts)
	if dbSyncs == 0 {
		t.Errorf("no checkpoint in %d runs: the automatic checkpoint is off", runs)
	}
}
