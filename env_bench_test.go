package hostfork_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// benchHost opens a store on tmpfs (so that overlay uppers and plain
// copies are not measured against the slow ext4 root) with its own cgroup
// parent; both go at cleanup.
func benchHost(b *testing.B) *hostfork.Host {
	b.Helper()
	parent := testutil.CgroupParent(b)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(tmpfsDir(b), "store"), CgroupParent: parent})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return h
}

// cpuTime is the CPU time (user + system) used so far by this process and
// by its reaped descendants: guardians, keepers and workloads are all
// reaped before an iteration's figures are taken. Unlike wall time it
// hardly changes when other work loads the host.
func cpuTime() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// durations collects one figure per iteration and reports its median.
type durations []time.Duration

func (d durations) median() time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func (d durations) report(b *testing.B, unit string) {
	b.ReportMetric(float64(d.median().Microseconds())/1000, unit)
}

// BenchmarkEnvCreateToFirstExit measures, per tree mechanism and tree
// size, an environment's creation (plan, tree, cgroups, keeper and view)
// up to the exit of its first command (true), and separately its stop plus
// the deletion of its tree. Reported: the medians, "ms/create-to-exit",
// "ms/stop+delete" and the CPU time of the whole cycle, "cpu-ms/cycle"
// (this process and everything it started). Run with a fixed count, e.g.
//
//	go test -run '^$' -bench EnvCreateToFirstExit -benchtime 15x .
func BenchmarkEnvCreateToFirstExit(b *testing.B) {
	testutil.RequireRoot(b)
	mnt := testutil.LoopBtrfs(b, "")
	shm := tmpfsDir(b)
	for _, n := range testutil.BenchFiles(b, 2000, 20000) {
		lower := filepath.Join(shm, fmt.Sprintf("tree-%d", n))
		testutil.BuildTree(b, lower, n)
		subvol := filepath.Join(mnt, fmt.Sprintf("base-%d", n))
		if err := storage.CreateSubvolume(subvol); err != nil {
			b.Fatal(err)
		}
		testutil.BuildTree(b, subvol, n)
		unix.Sync()
		for _, m := range []struct{ name, kind, source string }{
			{"btrfs", spec.KindBtrfs, subvol},
			{"overlay-tmpfs", spec.KindOverlay, lower},
			{"copy-tmpfs", spec.KindCopy, lower},
			{"copy-btrfs-reflink", spec.KindCopy, subvol},
		} {
			b.Run(fmt.Sprintf("%s/files=%d", m.name, n), func(b *testing.B) {
				h := benchHost(b)
				target := b.TempDir()
				s := spec.Environment{
					Trees: map[string]spec.Tree{"proj": {Kind: m.kind, Source: m.source}},
					View:  spec.View{Replace: map[string]string{target: "proj"}},
				}
				benchCreateToExit(b, h, s)
			})
		}
	}
}

func benchCreateToExit(b *testing.B, h *hostfork.Host, s spec.Environment) {
	ctx := context.Background()
	var up, down, cpu durations
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime()
		t0 := time.Now()
		p, err := h.Plan(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		env, err := h.Create(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		cmd := env.Command("true")
		if err := cmd.Start(ctx); err != nil {
			b.Fatal(err)
		}
		r, err := cmd.WaitTree(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		b.StopTimer()
		if st, ok := hostfork.ExitStatus(r); !ok || st != 0 {
			b.Fatalf("true: %+v", r)
		}
		if err := env.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
			b.Fatal(err)
		}
		removeTrees(b, h, env.ID())
		up = append(up, t1.Sub(t0))
		down = append(down, time.Since(t1))
		cpu = append(cpu, cpuTime()-c0)
		b.StartTimer()
	}
	b.StopTimer()
	up.report(b, "ms/create-to-exit")
	down.report(b, "ms/stop+delete")
	cpu.report(b, "cpu-ms/cycle")
}

// BenchmarkExecVsRun compares a command in an existing environment (exec)
// with a whole run without a view (create, the command, stop), which is
// what 'hostfork run -- true' does. Reported: the medians of the wall
// time, "ms/op-median", and of the CPU time, "cpu-ms/op".
//
//	go test -run '^$' -bench ExecVsRun -benchtime 200x .
func BenchmarkExecVsRun(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	b.Run("run-no-view", func(b *testing.B) {
		h := benchHost(b)
		benchRun(b, func() {
			p, err := h.Plan(ctx, spec.Environment{})
			if err != nil {
				b.Fatal(err)
			}
			env, err := h.Create(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			benchTrue(b, env)
			if err := env.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("exec-no-view", func(b *testing.B) {
		h := benchHost(b)
		env := benchEnv(b, h, spec.Environment{})
		benchRun(b, func() { benchTrue(b, env) })
	})
	b.Run("exec-overlay-view", func(b *testing.B) {
		h := benchHost(b)
		lower := filepath.Join(tmpfsDir(b), "lower")
		testutil.BuildTree(b, lower, 2000)
		env := benchEnv(b, h, spec.Environment{
			Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
			View:  spec.View{Replace: map[string]string{b.TempDir(): "proj"}, Scratch: []string{b.TempDir()}},
		})
		benchRun(b, func() { benchTrue(b, env) })
	})
}

func benchEnv(b *testing.B, h *hostfork.Host, s spec.Environment) *hostfork.Env {
	b.Helper()
	ctx := context.Background()
	p, err := h.Plan(ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}); err != nil {
			b.Errorf("cleanup: %v", err)
		}
		removeTrees(b, h, env.ID())
	})
	return env
}

func benchTrue(b *testing.B, env *hostfork.Env) {
	ctx := context.Background()
	cmd := env.Command("true")
	if err := cmd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	r, err := cmd.WaitTree(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st, ok := hostfork.ExitStatus(r); !ok || st != 0 {
		b.Fatalf("true: %+v", r)
	}
}

func benchRun(b *testing.B, op func()) {
	var d, cpu durations
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime()
		t0 := time.Now()
		op()
		d = append(d, time.Since(t0))
		cpu = append(cpu, cpuTime()-c0)
	}
	b.StopTimer()
	d.report(b, "ms/op-median")
	cpu.report(b, "cpu-ms/op")
}
