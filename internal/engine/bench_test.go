package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/internal/tree"
	"github.com/habemus-papadum/hostfork/spec"
)

// Benchmarks of the engine side by side with the plain kernel operation,
// interleaved iteration by iteration. Each reports its medians as
// ms/<series> and logs every series' median, p10, p90 and the load.
// Figures and commands: docs/benchmarks.md (bench/gobench.sh runs them).

// series collects one measured quantity.
type series struct {
	name string
	v    []float64
}

func (s *series) time(f func() error) error {
	t := time.Now()
	err := f()
	s.v = append(s.v, float64(time.Since(t).Nanoseconds())/1e6)
	return err
}

func (s *series) q(p float64) float64 {
	v := slices.Clone(s.v)
	slices.Sort(v)
	i := int(p*float64(len(v))+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func (s *series) median() float64 {
	v := slices.Clone(s.v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func report(b *testing.B, all ...*series) {
	b.Helper()
	load, _ := os.ReadFile("/proc/loadavg")
	ref := all[0]
	for _, s := range all {
		if len(s.v) == 0 {
			continue
		}
		b.ReportMetric(s.median(), "ms/"+s.name)
		b.Logf("%-22s median %7.2f ms  p10 %7.2f  p90 %7.2f  n=%d  = %.2f× %s, %+.2f ms", s.name, s.median(), s.q(.1), s.q(.9), len(s.v),
			s.median()/ref.median(), ref.name, s.median()-ref.median())
	}
	b.Logf("load %s", strings.TrimSpace(string(load)))
}

// benchEngine opens an engine on a new store under dir with its own
// cgroup parent; both go at the end.
func benchEngine(b *testing.B, dir string) *Engine {
	b.Helper()
	testutil.RequireRoot(b)
	parent := testutil.CgroupParent(b)
	root, err := os.MkdirTemp(dir, "hostfork-bench-")
	if err != nil {
		b.Fatal(err)
	}
	e, err := Open(context.Background(), Options{Root: root, CgroupParent: parent})
	if err != nil {
		os.RemoveAll(root)
		b.Fatal(err)
	}
	b.Cleanup(func() {
		e.Close()
		// A watcher may still rewrite a manifest just after its
		// TreeDone: give it a moment before the store goes.
		time.Sleep(100 * time.Millisecond)
		os.RemoveAll(root)
	})
	if !e.Capabilities().Cgroup2 {
		testutil.Skip(b, "no cgroup2 tier: "+e.Capabilities().Cgroup2Reason)
	}
	return e
}

// benchEnv creates an environment that runs until stopped; it is stopped
// at the end.
func benchEnv(b testing.TB, e *Engine) *api.Env {
	b.Helper()
	ctx := context.Background()
	p, err := e.Plan(ctx, spec.Environment{Lifetime: spec.Lifetime{UntilStopped: true}})
	if err != nil {
		b.Fatal(err)
	}
	env, _, err := e.Create(ctx, p, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = e.StopEnv(context.Background(), env.ID, StopOptions{Grace: -1}) })
	return env
}

func waitOK(r *Running) error {
	<-r.TreeDone()
	if err := r.RecordErr(); err != nil {
		return err
	}
	rec := r.Record()
	if rec.ExitCode == nil || *rec.ExitCode != 0 || !rec.Final() {
		return fmt.Errorf("command %s: state %s, exit %v, error %q", rec.ID, rec.State, rec.ExitCode, rec.Error)
	}
	return nil
}

// BenchmarkLaunch: a command in an existing environment to its recorded
// exit, against a plain fork/exec, with the store on the root disk and on
// tmpfs. Per iteration, interleaved:
//   - exec: exec.Command("/bin/true").Run();
//   - start: Engine.Start of /bin/true (files mode) in an existing
//     environment, up to TreeDone (reservation, guardian at its gate,
//     registration, release, result: three durable commits);
//   - run: Plan + Create with /bin/true as the first command and AutoStop,
//     up to TreeDone (what 'hostfork run' does in-process).
//
// The test binary is the guardian here (/proc/self/exe carries the C
// helpers, as every binary linking the engine does).
func BenchmarkLaunch(b *testing.B) {
	for _, where := range []struct{ name, dir string }{{"disk", os.TempDir()}, {"tmpfs", "/dev/shm"}} {
		b.Run(where.name, func(b *testing.B) {
			e := benchEngine(b, where.dir)
			env := benchEnv(b, e)
			ctx := context.Background()
			plain, start, run := &series{name: "exec"}, &series{name: "start"}, &series{name: "run"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				steps := []func() error{
					func() error { return plain.time(func() error { return exec.Command("/bin/true").Run() }) },
					func() error {
						return start.time(func() error {
							r, err := e.Start(ctx, env.ID, &CommandSpec{Argv: []string{"/bin/true"}, Output: api.OutputFiles})
							if err != nil {
								return err
							}
							return waitOK(r)
						})
					},
					func() error {
						return run.time(func() error {
							p, err := e.Plan(ctx, spec.Environment{})
							if err != nil {
								return err
							}
							_, r, err := e.Create(ctx, p, &CommandSpec{Argv: []string{"/bin/true"}, Output: api.OutputFiles, AutoStop: true})
							if err != nil {
								return err
							}
							return waitOK(r)
						})
					},
				}
				for k := range steps {
					if err := steps[(k+i)%len(steps)](); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			report(b, plain, start, run)
		})
	}
}

const tree50 = `for i in $(seq 49); do sleep 1000 & done; wait`

// waitMembers waits (untimed setup) until the cgroup at path and its
// descendants hold n processes.
func waitMembers(b *testing.B, path string, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, _ := cgroup.Open(path).AllProcs()
		if len(p) >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d members after 30 s", path, len(p), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// BenchmarkStopTree50: stop of a 50-process tree (sh and 49 sleeps) to
// verified-empty, against the bare kernel operation. The tree is fully
// started before the clock starts. Per iteration, interleaved:
//   - bare: the tree cloned into a fresh cgroup; cgroup.kill, wait for
//     populated 0 (WaitEmpty), rmdir;
//   - kill: Engine.StopCommand with Grace -1 (reason recorded, cgroup.kill,
//     verify empty, record settled, cgroup gone);
//   - term: the same with the default grace (SIGTERM to each member
//     through a pidfd; sleep dies of it);
//   - tree-kill: the one tree-stop mechanism alone (tree.Kill: freeze,
//     membership listings until stable, pidfds, cgroup.kill, SIGKILL,
//     verify, thaw) on a bare tree's cgroup, then rmdir;
//   - tree-kill+root: the same with the tree's sh as a root, as a command's
//     guardian is (each membership listing then also walks /proc for the
//     root's descendants).
func BenchmarkStopTree50(b *testing.B) {
	e := benchEngine(b, os.TempDir())
	env := benchEnv(b, e)
	ctx := context.Background()
	bare, kill, term := &series{name: "bare"}, &series{name: "stop-kill"}, &series{name: "stop-term"}
	tkill, tkillRoot := &series{name: "tree-kill"}, &series{name: "tree-kill+root"}
	bareParent := testutil.CgroupParent(b)
	mount, err := cgroup.FindMount()
	if err != nil {
		b.Fatal(err)
	}
	// bareTree starts the tree in a fresh cgroup, times stop on it, and
	// reaps it.
	n := 0
	bareTree := func(stop func(g *cgroup.Group, leader int) error) error {
		n++
		g, err := cgroup.Create(filepath.Join(bareParent, fmt.Sprint("t", n)))
		if err != nil {
			return err
		}
		fd, err := g.OpenFD()
		if err != nil {
			return err
		}
		cmd := exec.Command("sh", "-c", tree50)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		err = cmd.Start()
		syscall.Close(fd)
		if err != nil {
			return err
		}
		waitMembers(b, g.Path, 50)
		err = stop(g, cmd.Process.Pid)
		_ = cmd.Wait()
		return err
	}
	stopOne := func(s *series, grace time.Duration) error {
		r, err := e.Start(ctx, env.ID, &CommandSpec{Argv: []string{"sh", "-c", tree50}, Output: api.OutputFiles})
		if err != nil {
			return err
		}
		waitMembers(b, r.Record().CgroupPath, 50)
		err = s.time(func() error {
			_, err := e.StopCommand(ctx, r.ID(), StopOptions{Grace: grace})
			return err
		})
		<-r.TreeDone()
		return err
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		steps := []func() error{
			func() error {
				return bareTree(func(g *cgroup.Group, _ int) error {
					return bare.time(func() error {
						if err := g.Kill(); err != nil {
							return err
						}
						if err := g.WaitEmpty(ctx); err != nil {
							return err
						}
						return g.Remove()
					})
				})
			},
			func() error {
				return bareTree(func(g *cgroup.Group, _ int) error {
					return tkill.time(func() error {
						if _, err := tree.Kill(ctx, tree.Target{Cgroup: g.Path, Mount: mount.Path}); err != nil {
							return err
						}
						return g.Remove()
					})
				})
			},
			func() error {
				return bareTree(func(g *cgroup.Group, leader int) error {
					id, err := linux.IdentityOf(leader)
					if err != nil {
						return err
					}
					return tkillRoot.time(func() error {
						// The root itself is not a member: kill it after,
						// as the guardian exits after its tree.
						if _, err := tree.Kill(ctx, tree.Target{Cgroup: g.Path, Mount: mount.Path, Roots: []linux.Identity{id}}); err != nil {
							return err
						}
						if err := g.Kill(); err != nil {
							return err
						}
						if err := g.WaitEmpty(ctx); err != nil {
							return err
						}
						return g.Remove()
					})
				})
			},
			func() error { return stopOne(kill, -1) },
			func() error { return stopOne(term, 0) },
		}
		for k := range steps {
			if err := steps[(k+i)%len(steps)](); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	report(b, bare, kill, term, tkill, tkillRoot)
}
