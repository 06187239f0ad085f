package hostfork_test

// Benchmarks for issue 5 (scale): reap, ps and status over a store with
// 10,000 retained runs, and gc of 1,000 overlay trees against rm -rf.
// Results: docs/benchmarks.md; bench/scale.sh measures the same store
// through the CLI.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s: %q", name, s)
	}
	return n
}

// retainedRuns fills the store to n retained runs, each what
// 'hostfork run -- true' leaves behind: an environment created, one
// command run to its recorded exit (run directory, logs, receipt,
// manifest, ledger entries), the environment stopped. It uses 4 workers,
// each with its own Host (as 4 'hostfork run' processes would have), and
// returns how many runs it made.
func retainedRuns(b *testing.B, h *hostfork.Host, n int) int {
	b.Helper()
	ctx := context.Background()
	have, err := retained(ctx, h)
	if err != nil {
		b.Fatal(err)
	}
	if have >= n {
		return 0
	}
	var next atomic.Int64
	next.Store(int64(have))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	t0 := time.Now()
	for _, h := range workerHosts(b, h, 4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				err := func() error {
					p, err := h.Plan(ctx, spec.Environment{Purpose: "scale benchmark", Labels: map[string]string{"bench": "scale"}})
					if err != nil {
						return err
					}
					e, err := h.Create(ctx, p)
					if err != nil {
						return err
					}
					cmd := e.Command("true")
					if err := cmd.Start(ctx); err != nil {
						return err
					}
					if _, err := cmd.WaitTree(ctx); err != nil {
						return err
					}
					return e.Stop(ctx, hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
				}()
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	made := n - have
	b.Logf("made %d retained runs in %v (%.1f ms each, 4 workers); load: %s", made, time.Since(t0).Round(time.Millisecond), float64(time.Since(t0).Milliseconds())/float64(made), loadavg())
	return made
}

// retained counts the store's commands (one per retained run).
func retained(ctx context.Context, h *hostfork.Host) (int, error) {
	cmds, err := h.Commands(ctx, hostfork.CommandFilter{})
	return len(cmds), err
}

// workerHosts opens n more Hosts on h's store and cgroup parent, one per
// worker goroutine, as n concurrent 'hostfork run' processes would have.
// (Before commit 4cbed3d, one Host shared by 4 or more goroutines that
// stop environments stalled for the registry's 30 s busy timeout and
// failed with "database is locked"; docs/benchmarks.md, "Found".)
func workerHosts(b *testing.B, h *hostfork.Host, n int) []*hostfork.Host {
	b.Helper()
	var hs []*hostfork.Host
	for i := 0; i < n; i++ {
		w, err := hostfork.Open(context.Background(), hostfork.Options{Root: h.Root(), CgroupParent: h.Capabilities().CgroupParent})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		hs = append(hs, w)
	}
	return hs
}

// scaleHost opens the store for the scale benchmarks: $HOSTFORK_BENCH_STORE
// if set (filled to the wanted size if smaller, and left in place for
// bench/scale.sh to measure through the CLI), else a new one on the root
// disk that is removed at cleanup.
func scaleHost(b *testing.B) *hostfork.Host {
	b.Helper()
	root := os.Getenv("HOSTFORK_BENCH_STORE")
	if root == "" {
		return diskHost(b)
	}
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: root, CgroupParent: testutil.CgroupParent(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return h
}

// BenchmarkScale measures, over a store with HOSTFORK_BENCH_RUNS retained
// runs (default 10,000; see retainedRuns): a reap with nothing to do, ps
// (live commands only, the default: Host.Commands with Live), ps --all
// (every command), ps --label, envs (active) and envs --all, and status
// of an environment and of a command — the library calls the CLI verbs
// make.
//
//	go test -run '^$' -bench '^BenchmarkScale$' -benchtime 20x -timeout 60m .
func BenchmarkScale(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	h := scaleHost(b)
	n := envInt(b, "HOSTFORK_BENCH_RUNS", 10000)
	retainedRuns(b, h, n)
	rows, err := h.Commands(ctx, hostfork.CommandFilter{})
	if err != nil {
		b.Fatal(err)
	}
	if len(rows) < n {
		b.Fatalf("store has %d commands, want %d", len(rows), n)
	}
	last := rows[len(rows)-1]
	b.Logf("store %s: %d retained runs; load: %s", h.Root(), len(rows), loadavg())
	b.Run("reap", func(b *testing.B) {
		for b.Loop() {
			rep, err := h.Reap(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(rep.Actions) > 0 {
				b.Fatalf("reap had something to do: %+v", rep.Actions[0])
			}
		}
	})
	b.Run("ps", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Commands(ctx, hostfork.CommandFilter{Live: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ps-all", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Commands(ctx, hostfork.CommandFilter{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ps-label", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Commands(ctx, hostfork.CommandFilter{Labels: hostfork.Selector{"bench=scale"}, Live: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("envs", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Envs(ctx, hostfork.EnvFilter{Active: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("envs-all", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Envs(ctx, hostfork.EnvFilter{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("status-env", func(b *testing.B) {
		for b.Loop() {
			if e, _, err := h.Status(ctx, last.Env); err != nil || e == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("status-command", func(b *testing.B) {
		for b.Loop() {
			if _, c, err := h.Status(ctx, last.ID); err != nil || c == nil {
				b.Fatal(err)
			}
		}
	})
}

// writeTreeFiles writes files small files (4 KiB) into dir, 50 per
// subdirectory: what a workload leaves in an overlay upper.
func writeTreeFiles(b *testing.B, dir string, files int) {
	b.Helper()
	data := make([]byte, 4<<10)
	for i := 0; i < files; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i/50))
		if i%50 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i%50)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGCOverlay measures gc deleting the overlay trees of
// HOSTFORK_BENCH_TREES stopped environments (default 1,000), each upper
// holding HOSTFORK_BENCH_TREE_FILES files of 4 KiB (default 20), against
// one 'rm -rf' of a same-shaped copy of those directories (upper and work
// of each tree) on the same filesystem, made at the same time. Both sets
// are synced before the clock starts; rm -rf runs first. The store is on
// the root disk; the lower is one small directory on tmpfs. gc runs with
// --retain-trees 0s and evidence retained, so it deletes trees only.
// One measurement per iteration; each iteration builds its own trees.
//
//	go test -run '^$' -bench '^BenchmarkGCOverlay$' -benchtime 1x -count 3 -timeout 60m .
func BenchmarkGCOverlay(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	trees := envInt(b, "HOSTFORK_BENCH_TREES", 1000)
	files := envInt(b, "HOSTFORK_BENCH_TREE_FILES", 20)
	lower := filepath.Join(tmpfsDir(b), "lower")
	writeFiles(b, lower, map[string]string{"README": "lower\n"})
	rm := &series{name: "rm-rf"}
	gc := &series{name: "gc"}
	for it := 0; it < b.N; it++ {
		b.StopTimer()
		h := diskHost(b)
		mirror := filepath.Join(b.TempDir(), "mirror")
		target := b.TempDir()
		s := spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
			View:  spec.View{Replace: map[string]string{target: "proj"}},
		}
		var mirrors, ids []string
		var mu sync.Mutex
		t0 := time.Now()
		hs := workerHosts(b, h, 4)
		parallel(4, func(w int) error {
			h := hs[w]
			for i := w; i < trees; i += 4 {
				p, err := h.Plan(ctx, s)
				if err != nil {
					return err
				}
				e, err := h.Create(ctx, p)
				if err != nil {
					return err
				}
				if err := e.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
					return err
				}
				tr := e.Record().Trees[0]
				writeTreeFiles(b, tr.HostPath, files)
				m := filepath.Join(mirror, strconv.Itoa(i))
				writeTreeFiles(b, filepath.Join(m, "upper"), files)
				if err := os.MkdirAll(filepath.Join(m, "work", "work"), 0o700); err != nil {
					return err
				}
				mu.Lock()
				mirrors = append(mirrors, m)
				ids = append(ids, e.ID())
				mu.Unlock()
			}
			return nil
		}, b)
		unix.Sync()
		b.Logf("made %d stopped overlay environments (%d files each) in %v; load: %s", trees, files, time.Since(t0).Round(time.Millisecond), loadavg())
		b.StartTimer()

		t0 = time.Now()
		out, err := exec.Command("rm", append([]string{"-rf"}, mirrors...)...).CombinedOutput()
		rm.add(time.Since(t0))
		if err != nil {
			b.Fatalf("rm -rf: %v: %s", err, out)
		}

		zero, keep := time.Duration(0), 1000*time.Hour
		t0 = time.Now()
		rep, err := h.GC(ctx, hostfork.GCOptions{RetainTrees: &zero, RetainEvidence: &keep})
		gc.add(time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Deleted) != trees || len(rep.Errors) > 0 {
			b.Fatalf("gc deleted %d trees (want %d), errors %+v", len(rep.Deleted), trees, rep.Errors)
		}
		b.StopTimer()
		for _, id := range ids {
			st, _, err := h.Status(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if st.State != hostfork.EnvStopped || st.Trees[0].State != hostfork.TreeRemoved {
				b.Fatalf("after gc, %s is %s with tree %s", id, st.State, st.Trees[0].State)
			}
			if _, err := os.Stat(st.Trees[0].HostPath); !os.IsNotExist(err) {
				b.Fatalf("after gc, %s still exists (%v)", st.Trees[0].HostPath, err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportSeries(b, "ms", rm, gc)
}
