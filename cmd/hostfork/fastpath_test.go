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
// `run -- /bin/true` on a warm store makes at most three durable commits —
// the reservation, the guardian's registration, the result — each one
// fsync of the registry's WAL, and no other fsync (no directory fsync, no
// checkpoint on exit). The ledger rule still holds: each of the three is a
// step the fault matrix crashes between.
func TestRunFsyncBudget(t *testing.T) {
	c := newCLI(t)
	strace, err := exec.LookPath("strace")
	if err != nil {
		testutil.Skip(t, "strace is not installed (apt-get install strace)")
	}
	c.mustRun("run", "--", "/bin/true") // the store, its registry and WAL exist now
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	// The test binary is hostfork when its argv[0] says so (testscript).
	exe := filepath.Join(dir, "hostfork")
	if err := os.Symlink(c.exe, exe); err != nil {
		t.Fatal(err)
	}
	cmd := c.command("run", "--", "/bin/true")
	cmd.Args = append([]string{"strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs,sync", "-o", trace}, append([]string{exe}, cmd.Args[1:]...)...)
	cmd.Path = strace
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace hostfork run: %v: %s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`(fsync|fdatasync|sync_file_range|syncfs|sync)\((\d+)<([^>]*)>`)
	var syncs, wal []string
	for _, line := range strings.Split(string(b), "\n") {
		m := call.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		syncs = append(syncs, m[1]+" "+m[3])
		if m[1] == "fsync" && strings.HasSuffix(m[3], "registry.sqlite-wal") {
			wal = append(wal, m[3])
		}
	}
	t.Logf("syncs of one run: %q", syncs)
	if len(syncs) > 3 {
		t.Errorf("one run made %d syncs, want at most 3 (the three ledger commits): %q", len(syncs), syncs)
	}
	if len(wal) != len(syncs) {
		t.Errorf("a sync of something other than the registry's WAL: %q", syncs)
	}
	if len(wal) == 0 {
		t.Errorf("no commit reached the disk (the run's records must be durable before it returns)")
	}
}
