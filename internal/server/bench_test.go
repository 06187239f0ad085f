package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// Measurements for docs/benchmarks.md (run with -bench, -benchtime=Nx):
//
//	go test -run '^$' -bench . -benchtime 50x ./internal/server
//
// BenchmarkLaunch interleaves three ways of running /bin/true, one of each
// per iteration, and reports each one's median: a command through a warm
// server (POST /v1/envs/{id}/commands + wait for the tree, from the
// client; and from the server's side, its record's created_at, the
// reservation, to its tree_exited_at), the in-process
// CLI (`hostfork exec ENV -- /bin/true`: a Go start, the registry open, the
// launch), and bwrap.
func BenchmarkLaunch(b *testing.B) {
	e := servertest.New(b)
	s := e.Serve()
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "1h"}})
	if err != nil {
		b.Fatal(err)
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		testutil.Skip(b, "bwrap not found (apt-get install bubblewrap)")
	}
	var server, inside, cli, bw []time.Duration
	run := func(cmd *exec.Cmd) time.Duration {
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		rec, err := c.Wait(ctx, cmd.ID, client.WaitTree)
		if err != nil {
			b.Fatal(err)
		}
		server = append(server, time.Since(t0))
		if rec.TreeExitedAt == nil {
			b.Fatalf("command %s: no tree_exited_at after its tree's wait", rec.ID)
		}
		inside = append(inside, rec.TreeExitedAt.Sub(rec.CreatedAt))
		cli = append(cli, run(e.Command("exec", env.ID, "--stdin", "none", "--", "/bin/true")))
		bw = append(bw, run(exec.Command(bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true")))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(server)), "server-ms")
	b.ReportMetric(ms(median(inside)), "server-side-ms")
	b.ReportMetric(ms(median(inside))/ms(median(bw)), "server-side/bwrap")
	b.ReportMetric(ms(median(cli)), "cli-exec-ms")
	b.ReportMetric(ms(median(bw)), "bwrap-ms")
	b.Logf("n=%d: server side (the record's reservation to its tree's exit) median %.2f ms, p90 %.2f", b.N, ms(median(inside)), ms(pct(inside, 0.9)))
	b.Logf("n=%d medians: server %.2f ms, hostfork exec %.2f ms, bwrap %.2f ms (p90 %.2f / %.2f / %.2f)", b.N,
		ms(median(server)), ms(median(cli)), ms(median(bw)), ms(pct(server, 0.9)), ms(pct(cli, 0.9)), ms(pct(bw, 0.9)))
}

// BenchmarkConcurrent100 starts 100 commands at once through one server
// and waits for all their trees; one iteration is the whole batch.
func BenchmarkConcurrent100(b *testing.B) {
	e := servertest.New(b)
	s := e.Serve()
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "1h"}})
	if err != nil {
		b.Fatal(err)
	}
	var starts []time.Duration
	var mu sync.Mutex
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for j := 0; j < 100; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"/bin/true"}})
				if err != nil {
					errs <- err
					return
				}
				d := time.Since(t0)
				mu.Lock()
				starts = append(starts, d)
				mu.Unlock()
				if _, err := c.Wait(ctx, cmd.ID, client.WaitTree); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(median(starts)), "start-median-ms")
	b.ReportMetric(ms(pct(starts, 0.99)), "start-p99-ms")
	b.Logf("100 concurrent: start median %.1f ms, p99 %.1f ms; batch %.2f s", ms(median(starts)), ms(pct(starts, 0.99)), float64(b.Elapsed().Seconds())/float64(b.N))
}

// BenchmarkRetained1000 measures the server's RSS with 1,000 retained
// (created and stopped) environments: idle, and after a full listing and a
// scrape. It runs once whatever b.N.
func BenchmarkRetained1000(b *testing.B) {
	e := servertest.New(b)
	s := e.Serve()
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	pid := s.Cmd.Process.Pid
	base := rss(b, pid)
	const n = 1000
	t0 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "1h"}, "labels": map[string]string{"bench": "retained"}})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := c.StopEnv(ctx, env.ID, client.StopOptions{}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	made := time.Since(t0)
	idle := rss(b, pid)
	t1 := time.Now()
	envs, err := c.Envs(ctx, api.EnvFilter{})
	if err != nil {
		b.Fatal(err)
	}
	list := time.Since(t1)
	t2 := time.Now()
	if out, err := exec.Command("curl", "-sSf", "-o", "/dev/null", "--unix-socket", s.Socket, "http://localhost/metrics").CombinedOutput(); err != nil {
		b.Fatalf("/metrics: %v: %s", err, out)
	}
	scr := time.Since(t2)
	after := rss(b, pid)
	b.ReportMetric(float64(idle)/1024, "rss-idle-MiB")
	b.ReportMetric(float64(after)/1024, "rss-after-list-MiB")
	b.Logf("%d environments made and stopped in %v (%.1f ms each, 4 at a time); server RSS: %d KiB at start, %d KiB with %d retained, %d KiB after listing them (%v) and a scrape (%v)",
		n, made.Round(time.Millisecond), ms(made)/n*4, base, idle, len(envs), after, list.Round(time.Millisecond), scr.Round(time.Millisecond))
}

func rss(b *testing.B, pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func median(ds []time.Duration) time.Duration { return pct(ds, 0.5) }

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkSessionWebSocket measures a session through the server's
// WebSocket (GET /v1/commands/{id}/attach): a keystroke echoed back (one
// byte typed into a terminal running cat, read back as the terminal's
// echo: client → server → guardian → pty → guardian → server → client),
// and an attach's first replayed byte (dial, upgrade, welcome, replay).
// Medians of b.N each.
func BenchmarkSessionWebSocket(b *testing.B) {
	e := servertest.New(b)
	s := e.Serve()
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	env, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1h"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", "echo ready; exec cat"}, TTY: true}})
	if err != nil {
		b.Fatal(err)
	}
	id := env.Commands[0].ID
	if _, err := c.WaitFor(ctx, id, client.WaitOptions{For: "ready", Timeout: time.Minute}); err != nil {
		b.Fatal(err)
	}
	zero := int64(0)
	sess, err := c.Attach(ctx, id, client.AttachOptions{Replay: &zero})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	var echo, attach []time.Duration
	buf := make([]byte, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := sess.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			n, err := sess.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got = strings.IndexByte(string(buf[:n]), 'x') >= 0
		}
		echo = append(echo, time.Since(t0))

		t0 = time.Now()
		a, err := c.Attach(ctx, id, client.AttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.Read(buf); err != nil {
			b.Fatal(err)
		}
		attach = append(attach, time.Since(t0))
		a.Close()
	}
	b.StopTimer()
	b.ReportMetric(ms(median(echo)), "echo-ms")
	b.ReportMetric(ms(median(attach)), "attach-first-byte-ms")
	b.Logf("n=%d medians: keystroke echo %.3f ms (p90 %.3f), attach to first replayed byte %.3f ms (p90 %.3f)", b.N,
		ms(median(echo)), ms(pct(echo, 0.9)), ms(median(attach)), ms(pct(attach, 0.9)))
	if _, err := c.StopEnv(ctx, env.ID, client.StopOptions{}); err != nil {
		b.Fatal(err)
	}
}
