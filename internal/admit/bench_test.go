package admit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

const benchLive = 100

// cpuTime reports the process's user+system CPU time per operation beside
// ns/op, a figure that other load on a shared host doesn't inflate.
func cpuTime(b *testing.B) func() {
	var r0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
	return func() {
		var r1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
		ns := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkDecide is the pure decision alone: Compute and Decide over 100
// live workloads.
func BenchmarkDecide(b *testing.B) {
	in := Input{Host: Host{Cores: 64, MemAvailable: mem(512 * gib)}}
	for i := range benchLive {
		in.Live = append(in.Live, Workload{ID: fmt.Sprint(i), Sample: stable(uint64(i) << 26)})
	}
	defer cpuTime(b)()
	for b.Loop() {
		c, err := Compute(in)
		if err != nil {
			b.Fatal(err)
		}
		_ = Decide(c, Wait, false)
	}
}

// admitOnce is what a launch adds: sample the host and every live tree
// (two passes, the default 2 ms apart), compute, decide.
func admitOnce(b *testing.B, s Sampler, targets []Target, ids []string) {
	samples, err := s.Sample(context.Background(), targets)
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Host: SampleHost(), Live: make([]Workload, len(targets))}
	for i := range targets {
		in.Live[i] = Workload{ID: ids[i], Sample: &samples[i]}
	}
	c, err := Compute(in)
	if err != nil {
		b.Fatal(err)
	}
	_ = Decide(c, Wait, false)
	for _, s := range samples {
		if !s.Complete {
			b.Fatalf("incomplete sample: %+v", s)
		}
	}
}

// BenchmarkAdmitPIDTrees: 100 live workloads, each a 3-process tree given
// by its root PID (found by scanning /proc).
func BenchmarkAdmitPIDTrees(b *testing.B) {
	var targets []Target
	var ids []string
	for i := range benchLive {
		cmd := startTree(b, nil)
		targets = append(targets, Target{PIDs: []int{cmd.Process.Pid}})
		ids = append(ids, fmt.Sprint(i))
	}
	for _, pss := range []bool{false, true} {
		b.Run(fmt.Sprintf("pss=%v", pss), func(b *testing.B) {
			defer cpuTime(b)()
			for b.Loop() {
				admitOnce(b, Sampler{PSS: pss}, targets, ids)
			}
		})
	}
}

// BenchmarkAdmitCgroupMembers: 100 live workloads, each a 3-process tree in
// its own cgroup2 group without a memory controller (this hybrid host's
// case): members come from cgroup.procs, memory from /proc.
func BenchmarkAdmitCgroupMembers(b *testing.B) {
	parent := testutil.CgroupParent(b)
	var targets []Target
	var ids []string
	for i := range benchLive {
		g, err := cgroup.Create(filepath.Join(parent, fmt.Sprint(i)))
		if err != nil {
			b.Fatal(err)
		}
		fd, err := g.OpenFD()
		if err != nil {
			b.Fatal(err)
		}
		startTree(b, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
		unix.Close(fd)
		targets = append(targets, Target{Cgroup: g.Path})
		ids = append(ids, fmt.Sprint(i))
	}
	defer cpuTime(b)()
	for b.Loop() {
		admitOnce(b, Sampler{}, targets, ids)
	}
}

// BenchmarkAdmitCgroupCounters: 100 live workloads read from a memory
// counter each (cgroup v1 memory.usage_in_bytes here; memory.current on
// cgroup2 is the same single read).
func BenchmarkAdmitCgroupCounters(b *testing.B) {
	testutil.RequireRoot(b)
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.usage_in_bytes")); err != nil {
		testutil.Skip(b, "no cgroup v1 memory hierarchy")
	}
	parent := filepath.Join(root, testutil.UniqueName("hostfork-test"))
	if err := os.Mkdir(parent, 0o755); err != nil {
		b.Fatal(err)
	}
	var targets []Target
	var ids []string
	b.Cleanup(func() {
		for _, t := range targets {
			os.Remove(t.Cgroup)
		}
		os.Remove(parent)
	})
	for i := range benchLive {
		d := filepath.Join(parent, fmt.Sprint(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
		targets = append(targets, Target{Cgroup: d})
		ids = append(ids, fmt.Sprint(i))
	}
	defer cpuTime(b)()
	for b.Loop() {
		admitOnce(b, Sampler{}, targets, ids)
	}
}
