package hostfork_test

// Benchmarks for issue 4 (bounds): the stop protocol against a bare
// cgroup.kill, and admission at 100 live workloads. Results:
// docs/benchmarks.md.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// tree50 is a 50-process tree: a shell and 49 sleeps.
var tree50 = []string{"sh", "-c", "for i in $(seq 49); do sleep 1000 & done; wait"}

// waitMembers waits until the cgroup at path (and below) holds n processes.
func waitMembers(b *testing.B, path string, n int) {
	b.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		pids, err := cgroup.Open(path).AllProcs()
		if err != nil {
			b.Fatal(err)
		}
		if len(pids) >= n {
			return
		}
		if time.Now().After(end) {
			b.Fatalf("%s: %d members, want %d", path, len(pids), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// BenchmarkStopTree50 measures the stop of a 50-process tree from the
// request to a verified-empty group, interleaved in each iteration:
//   - bare: the tree cloned into a fresh cgroup, then cgroup.kill and a
//     wait (inotify on cgroup.events) for populated 0;
//   - stop-kill: Host.StopCommand with Grace -1 (record the reason,
//     freeze, check membership, cgroup.kill, wait for empty, the guardian's
//     receipt, the settled record, the cgroup removed);
//   - stop-term: the same with the default grace (SIGTERM to each member
//     through a pidfd; sleep and sh die of it, so no kill is needed);
//   - env-stop: Env.Stop of an environment holding that one tree (adds
//     the environment's records and cgroup).
//
// The trees are fully started (50 members counted) before the clock
// starts.
//
//	go test -run '^$' -bench '^BenchmarkStopTree50$' -benchtime 30x .
func BenchmarkStopTree50(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	parent := testutil.CgroupParent(b)
	host := diskHost(b)
	bare := &series{name: "bare-cgroup.kill"}
	kill := &series{name: "stop-kill"}
	term := &series{name: "stop-term"}
	envStop := &series{name: "env-stop"}
	libTree := func(env *hostfork.Env) *hostfork.Command {
		cmd := env.Command(tree50...)
		if err := cmd.Start(ctx); err != nil {
			b.Fatal(err)
		}
		waitWorkload(b, cmd)
		waitMembers(b, cmd.Record().CgroupPath, 50)
		return cmd
	}
	stopCmd := func(cmd *hostfork.Command, grace time.Duration, s *series) {
		t0 := time.Now()
		rec, err := host.StopCommand(ctx, cmd.ID(), hostfork.StopOptions{Grace: grace})
		s.add(time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if rec.TreeState != hostfork.PhaseExited {
			b.Fatalf("after stop: %+v", rec)
		}
		_, _ = cmd.WaitTree(ctx)
	}
	env := benchEnv(b, host, spec.Environment{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// bare
		g, err := cgroup.Create(filepath.Join(parent, fmt.Sprintf("bare-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		fd, err := g.OpenFD()
		if err != nil {
			b.Fatal(err)
		}
		c := exec.Command(tree50[0], tree50[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		waitMembers(b, g.Path, 50)
		t0 := time.Now()
		if err := g.Kill(); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = g.WaitEmpty(wctx)
		cancel()
		bare.add(time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		var ee *exec.ExitError
		if err := c.Wait(); !errors.As(err, &ee) {
			b.Fatalf("bare tree: %v", err)
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}

		stopCmd(libTree(env), -1, kill)
		stopCmd(libTree(env), 0, term)

		p, err := host.Plan(ctx, spec.Environment{})
		if err != nil {
			b.Fatal(err)
		}
		e, err := host.Create(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		cmd := libTree(e)
		t0 = time.Now()
		err = e.Stop(ctx, hostfork.StopOptions{Grace: -1})
		envStop.add(time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = cmd.WaitTree(ctx)
	}
	b.StopTimer()
	reportSeries(b, "ms", bare, kill, term, envStop)
}

// BenchmarkAdmission100 measures admission through the library with 100
// live agent workloads (each a 3-process tree: sh and two sleeps, in its
// own command cgroup; started with --admit skip so they all run):
//
//   - capacity: Host.Capacity (settle and sample every live agent tree,
//     read the host, compute) — what every admission decision does;
//   - agent-refused: Command.Start of an agent workload with Admit "fail"
//     on this full host, up to the refusal: admission lock, capacity,
//     decision — the whole cost admission adds to a launch;
//   - launch: for scale, a plain (non-agent) launch of /bin/true to its
//     recorded exit in the same store.
//
// Run it with:
//
//	go test -run '^$' -bench '^BenchmarkAdmission100$' -benchtime 30x .
func BenchmarkAdmission100(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	host := diskHost(b)
	live := benchEnv(b, host, spec.Environment{})
	for i := 0; i < 100; i++ {
		cmd := live.Command("sh", "-c", "sleep 1000 & sleep 1000 & wait")
		cmd.Workload = hostfork.WorkloadAgent
		cmd.Admit = hostfork.AdmitSkip
		if err := cmd.Start(ctx); err != nil {
			b.Fatal(err)
		}
		waitWorkload(b, cmd)
		waitMembers(b, cmd.Record().CgroupPath, 3)
	}
	env := benchEnv(b, host, spec.Environment{})
	capa := &series{name: "capacity"}
	refused := &series{name: "agent-refused"}
	launch := &series{name: "launch"}
	rep, err := host.Capacity(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if len(rep.Live) != 100 {
		b.Fatalf("capacity sees %d live agents, want 100", len(rep.Live))
	}
	b.Logf("capacity: %d live, %d free slots", len(rep.Live), rep.Free)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := host.Capacity(ctx); err != nil {
			b.Fatal(err)
		}
		capa.add(time.Since(t0))

		cmd := env.Command("/bin/true")
		cmd.Workload = hostfork.WorkloadAgent
		cmd.Admit = hostfork.AdmitFail
		t0 = time.Now()
		err := cmd.Start(ctx)
		refused.add(time.Since(t0))
		if !errors.Is(err, hostfork.ErrAdmissionRefused) {
			b.Fatalf("agent start on a full host: %v, want %v", err, hostfork.ErrAdmissionRefused)
		}

		t0 = time.Now()
		launchTrue(b, env, "/bin/true")
		launch.add(time.Since(t0))
	}
	b.StopTimer()
	reportSeries(b, "ms", launch, capa, refused)
}
