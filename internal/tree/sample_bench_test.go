package tree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/admit"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
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

// admitOnce is what admission adds to a launch (internal/engine,
// Capacity): sample every live tree (two passes, the default 2 ms apart)
// and the host, compute, decide.
func admitOnce(b *testing.B, s Sampler, targets []SampleTarget, ids []string) {
	samples, err := s.Sample(context.Background(), targets)
	if err != nil {
		b.Fatal(err)
	}
	in := admit.Input{
		Host: admit.Host{Cores: linux.AllowedCPUs(), MemAvailable: linux.MemAvailable()},
		Live: make([]admit.Workload, len(targets)),
	}
	for i := range targets {
		in.Live[i] = admit.Workload{ID: ids[i], Sample: &samples[i]}
	}
	c, err := admit.Compute(in)
	if err != nil {
		b.Fatal(err)
	}
	_ = admit.Decide(c, admit.Wait, false)
	for _, s := range samples {
		if !s.Complete {
			b.Fatalf("incomplete sample: %+v", s)
		}
	}
}

// BenchmarkAdmitPIDTrees: 100 live workloads, each a 3-process tree given
// by its root PID (members found by descendantsOf).
func BenchmarkAdmitPIDTrees(b *testing.B) {
	var targets []SampleTarget
	var ids []string
	for i := range benchLive {
		cmd := startTree(b, nil)
		targets = append(targets, SampleTarget{PIDs: []int{cmd.Process.Pid}})
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
	var targets []SampleTarget
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
		targets = append(targets, SampleTarget{Cgroup: g.Path})
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
	var targets []SampleTarget
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
		targets = append(targets, SampleTarget{Cgroup: d})
		ids = append(ids, fmt.Sprint(i))
	}
	defer cpuTime(b)()
	for b.Loop() {
		admitOnce(b, Sampler{}, targets, ids)
	}
}
