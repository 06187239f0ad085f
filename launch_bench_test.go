package hostfork_test

// Benchmarks for issue 2 (owned command trees): launch cost against plain
// fork/exec, many concurrent commands against bwrap, and the guardian's
// memory. Results and how to read them: docs/benchmarks.md.
//
// This machine is shared and noisy, so each benchmark runs its peers side
// by side, interleaved iteration by iteration, and reports medians (as
// metrics) and a spread line (b.Log, always printed for benchmarks). No
// benchmark asserts a time.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// series is one measured figure per iteration, in milliseconds.
type series struct {
	name string
	v    []float64
}

func (s *series) add(d time.Duration) { s.v = append(s.v, float64(d)/float64(time.Millisecond)) }

// quantile is the q-quantile (nearest rank) of the values.
func (s *series) quantile(q float64) float64 {
	if len(s.v) == 0 {
		return 0
	}
	v := slices.Clone(s.v)
	slices.Sort(v)
	i := int(q*float64(len(v)-1) + 0.5)
	return v[i]
}

func (s *series) median() float64 { return s.quantile(0.5) }

// spread is "median (p10–p90, n)" for the log line.
func (s *series) spread() string {
	return fmt.Sprintf("%s %.3f (p10 %.3f, p90 %.3f, n=%d)", s.name, s.median(), s.quantile(0.1), s.quantile(0.9), len(s.v))
}

// reportSeries reports each series' median as "<unit>/<name>" and logs
// the spreads, plus each later series' median ratio to the first one.
func reportSeries(b *testing.B, unit string, ss ...*series) {
	b.Helper()
	var lines []string
	for i, s := range ss {
		b.ReportMetric(s.median(), unit+"/"+s.name)
		line := s.spread()
		if i > 0 && ss[0].median() > 0 {
			line += fmt.Sprintf(" = %.2f× %s, %+.3f %s", s.median()/ss[0].median(), ss[0].name, s.median()-ss[0].median(), unit)
		}
		lines = append(lines, line)
	}
	b.Logf("%s medians: %s; load: %s", unit, strings.Join(lines, "; "), loadavg())
}

// loadavg is /proc/loadavg's first three fields, to print beside figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// diskHost opens a store in a temporary directory on the root disk (where
// a real store lives, and where fsync costs what it costs), with its own
// cgroup parent; both go at cleanup.
func diskHost(b *testing.B) *hostfork.Host {
	b.Helper()
	parent := testutil.CgroupParent(b)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(b.TempDir(), "store"), CgroupParent: parent})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	// Runs after the environments' own cleanups (stops), before Close:
	// a command's watcher rewrites the run's manifest just after WaitTree
	// has returned, and after a stop, so give those writes a moment before
	// the store is removed.
	b.Cleanup(func() { time.Sleep(200 * time.Millisecond) })
	return h
}

// launchTrue starts argv in env and waits for its recorded tree exit.
func launchTrue(b *testing.B, env *hostfork.Env, argv ...string) {
	b.Helper()
	ctx := context.Background()
	cmd := env.Command(argv...)
	if err := cmd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	r, err := cmd.WaitTree(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st, ok := hostfork.ExitStatus(r); !ok || st != 0 || r.TreeState != hostfork.PhaseExited {
		b.Fatalf("%q: %+v", argv, r)
	}
}

// BenchmarkLaunch compares, interleaved in each iteration: plain
// fork/exec of /bin/true (os/exec, Run); the library launching /bin/true
// in an existing environment up to its recorded tree exit (Command.Start,
// WaitTree: registration, guardian, gate, receipt, settled record, all
// durable); and a whole run (Plan, Create, the command, Env.Stop), which
// is what 'hostfork run -- /bin/true' does in-process. The store is on the
// root disk (store=disk, as /var/lib/hostfork would be) or on tmpfs.
//
//	go test -run '^$' -bench '^BenchmarkLaunch$' -benchtime 200x .
func BenchmarkLaunch(b *testing.B) {
	testutil.RequireRoot(b)
	for _, where := range []string{"disk", "tmpfs"} {
		b.Run("store="+where, func(b *testing.B) {
			ctx := context.Background()
			h := diskHost
			if where == "tmpfs" {
				h = benchHost
			}
			host := h(b)
			env := benchEnv(b, host, spec.Environment{})
			plain := &series{name: "plain-exec"}
			lib := &series{name: "library-exec"}
			whole := &series{name: "library-run"}
			// Warm up both paths once (page cache, first registry pages).
			_ = exec.Command("/bin/true").Run()
			launchTrue(b, env, "/bin/true")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := exec.Command("/bin/true").Run(); err != nil {
					b.Fatal(err)
				}
				plain.add(time.Since(t0))

				t0 = time.Now()
				launchTrue(b, env, "/bin/true")
				lib.add(time.Since(t0))

				t0 = time.Now()
				p, err := host.Plan(ctx, spec.Environment{})
				if err != nil {
					b.Fatal(err)
				}
				e, err := host.Create(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				launchTrue(b, e, "/bin/true")
				if err := e.Stop(ctx, hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit}); err != nil {
					b.Fatal(err)
				}
				whole.add(time.Since(t0))
			}
			b.StopTimer()
			reportSeries(b, "ms", plain, lib, whole)
		})
	}
}

// benchConcurrent is the number of concurrent commands in
// BenchmarkConcurrentSleep (HOSTFORK_BENCH_CONCURRENT, default 200).
func benchConcurrent(b *testing.B) int {
	if s := os.Getenv("HOSTFORK_BENCH_CONCURRENT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("HOSTFORK_BENCH_CONCURRENT: %q", s)
		}
		return n
	}
	return 200
}

// BenchmarkConcurrentSleep starts 200 'sleep 1000' commands at once, waits
// until every one is running, then stops them all and waits until every
// one is gone; it reports the time per command. Interleaved in each
// iteration:
//
//   - plain: os/exec, all started from 200 goroutines, then Kill and Wait
//     each;
//   - bwrap: 'bwrap --die-with-parent --info-fd 3 --bind / / --dev /dev
//     --proc /proc sleep 1000' cloned into one cgroup; running = bwrap
//     wrote its info (the sandbox is set up); stopped = cgroup.kill and
//     the group reported empty;
//   - library: one environment (created before the clock starts), 200
//     Command.Start from 200 goroutines; running = the workload's PID is
//     recorded; stopped = Env.Stop returned (every tree confirmed gone and
//     recorded, cgroups removed).
//
// Run it with:
//
//	go test -run '^$' -bench '^BenchmarkConcurrentSleep$' -benchtime 5x .
func BenchmarkConcurrentSleep(b *testing.B) {
	testutil.RequireRoot(b)
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		testutil.Skip(b, "bwrap not found (apt-get install bubblewrap)")
	}
	n := benchConcurrent(b)
	parent := testutil.CgroupParent(b)
	host := diskHost(b)
	ctx := context.Background()
	plain := &series{name: "plain"}
	bw := &series{name: "bwrap"}
	lib := &series{name: "library"}
	libStart := &series{name: "library-start-part"}
	libStop := &series{name: "library-stop-part"}
	per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		// plain
		t0 := time.Now()
		cmds := make([]*exec.Cmd, n)
		parallel(n, func(i int) error {
			cmds[i] = exec.Command("sleep", "1000")
			return cmds[i].Start()
		}, b)
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		plain.add(per(time.Since(t0)))

		// bwrap, in one cgroup
		g, err := cgroup.Create(filepath.Join(parent, fmt.Sprintf("bwrap-%d", it)))
		if err != nil {
			b.Fatal(err)
		}
		fd, err := g.OpenFD()
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		parallel(n, func(i int) error {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			defer r.Close()
			c := exec.Command(bwrap, "--die-with-parent", "--info-fd", "3", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "sleep", "1000")
			c.ExtraFiles = []*os.File{w}
			c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			err = c.Start()
			w.Close()
			if err != nil {
				return err
			}
			cmds[i] = c
			// bwrap writes its info once the sandbox is set up, just
			// before it runs the command.
			if _, err := bufio.NewReader(r).ReadString('}'); err != nil {
				return fmt.Errorf("bwrap info: %w", err)
			}
			return nil
		}, b)
		if err := g.Kill(); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := g.WaitEmpty(wctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		for _, c := range cmds {
			_ = c.Wait()
		}
		bw.add(per(time.Since(t0)))
		unix.Close(fd)
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}

		// library
		p, err := host.Plan(ctx, spec.Environment{})
		if err != nil {
			b.Fatal(err)
		}
		env, err := host.Create(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		hcmds := make([]*hostfork.Command, n)
		t0 = time.Now()
		parallel(n, func(i int) error {
			hcmds[i] = env.Command("sleep", "1000")
			return hcmds[i].Start(ctx)
		}, b)
		for _, c := range hcmds {
			waitWorkload(b, c)
		}
		t1 := time.Now()
		if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
			b.Fatal(err)
		}
		lib.add(per(time.Since(t0)))
		libStart.add(per(t1.Sub(t0)))
		libStop.add(per(time.Since(t1)))
		for _, c := range hcmds {
			if r, _ := c.WaitTree(ctx); r.TreeState != hostfork.PhaseExited {
				b.Fatalf("after stop: %+v", r)
			}
		}
	}
	b.StopTimer()
	reportSeries(b, "ms-per-command", plain, bw, lib, libStart, libStop)
}

// parallel runs fn(0..n-1) on n goroutines and fails b on the first error.
func parallel(n int, fn func(i int) error, b *testing.B) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = fn(i)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// anonKiB reads a process's anonymous memory: RssAnon from
// /proc/PID/status and Anonymous from /proc/PID/smaps_rollup, in KiB.
func anonKiB(b *testing.B, pid int) (rssAnon, anonymous float64) {
	b.Helper()
	field := func(file, key string) float64 {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, key+":"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					v, err := strconv.ParseFloat(f[0], 64)
					if err != nil {
						b.Fatal(err)
					}
					return v
				}
			}
		}
		b.Fatalf("/proc/%d/%s has no %s", pid, file, key)
		return 0
	}
	return field("status", "RssAnon"), field("smaps_rollup", "Anonymous")
}

// goSleeper builds a Go program that only sleeps, the reference for a
// guardian written in Go.
func goSleeper(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	src := "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module sleeper\n\ngo 1.26\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "sleeper")
	c := exec.Command(gobin, "build", "-o", out, ".")
	c.Dir = dir
	// A Go program without cgo, whatever GOFLAGS the suite runs with (the
	// installed build's -linkmode=external needs cgo).
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if o, err := c.CombinedOutput(); err != nil {
		b.Fatalf("building the Go sleeper: %v: %s", err, o)
	}
	return out
}

// BenchmarkGuardianMemory reads the anonymous memory of a guardian that
// supervises 'sleep 1000' (started through the library), of a Go program
// that only sleeps, and of the sleep itself, each 100 ms after it started.
// Reported: the medians in KiB.
//
//	go test -run '^$' -bench '^BenchmarkGuardianMemory$' -benchtime 10x .
func BenchmarkGuardianMemory(b *testing.B) {
	testutil.RequireRoot(b)
	ctx := context.Background()
	sleeper := goSleeper(b)
	host := diskHost(b)
	env := benchEnv(b, host, spec.Environment{})
	var gRSS, gAnon, goRSS, goAnon, slRSS, slAnon []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := env.Command("sleep", "1000")
		if err := cmd.Start(ctx); err != nil {
			b.Fatal(err)
		}
		gs := exec.Command(sleeper)
		if err := gs.Start(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		waitWorkload(b, cmd)
		rec := cmd.Record()
		r, a := anonKiB(b, rec.Guardian.PID)
		gRSS, gAnon = append(gRSS, r), append(gAnon, a)
		r, a = anonKiB(b, gs.Process.Pid)
		goRSS, goAnon = append(goRSS, r), append(goAnon, a)
		r, a = anonKiB(b, rec.Workload.PID)
		slRSS, slAnon = append(slRSS, r), append(slAnon, a)
		_ = gs.Process.Kill()
		_ = gs.Wait()
		if _, err := cmd.StopTree(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	med := func(v []float64) float64 { s := series{v: v}; return s.median() }
	b.ReportMetric(med(gRSS), "KiB-RssAnon/guardian")
	b.ReportMetric(med(gAnon), "KiB-Anonymous/guardian")
	b.ReportMetric(med(goRSS), "KiB-RssAnon/go-sleeper")
	b.ReportMetric(med(goAnon), "KiB-Anonymous/go-sleeper")
	b.ReportMetric(med(slRSS), "KiB-RssAnon/sleep")
	b.Logf("guardian RssAnon %v KiB, Anonymous %v KiB; Go sleeper RssAnon %v, Anonymous %v; sleep RssAnon %v, Anonymous %v; load: %s",
		gRSS, gAnon, goRSS, goAnon, slRSS, slAnon, loadavg())
}
