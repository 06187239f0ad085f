package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// Measurements for docs/benchmarks.md ("Issue 38: the E2B-compatible front"), with
// E2B's real SDK against a real hostfork serve --e2b-listen. Reported,
// not asserted:
//
//	go test ./internal/e2b/ -run '^$' -bench SDKCreateRunKill -benchtime 150x
//	go test ./internal/e2b/ -run '^$' -bench SDKConcurrent50 -benchtime 5x
//	go test ./internal/e2b/ -run '^$' -bench SDKLive200 -benchtime 1x
//	HOSTFORK_BENCH_BASE_BIN=/tmp/base-bin/hostfork \
//	  go test ./internal/e2b/ -run '^$' -bench SDKRoundAB -benchtime 160x
//
// Every sandbox gets an empty HOME (see testdata/bench.mjs): the SDK runs
// each command as `bash -l -c CMD`, which reads the host user's dotfiles,
// and those measure the host, not hostfork. The peers get the same HOME.

// benchNode is testdata/bench.mjs running, asked one line at a time.
type benchNode struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
	cancel context.CancelFunc
}

func startBenchNode(b *testing.B, f *e2btest.Front, home string) *benchNode {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	n := &benchNode{cancel: cancel}
	cmd, err := f.NodeCmd(ctx, e2btest.Run{Script: "testdata/bench.mjs", Env: []string{"BENCH_HOME=" + home}})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	n.cmd = cmd
	cmd.Stderr = &n.stderr
	if n.in, err = cmd.StdinPipe(); err != nil {
		cancel()
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	n.out = bufio.NewScanner(stdout)
	n.out.Buffer(make([]byte, 1<<16), 1<<22)
	if err := cmd.Start(); err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		n.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	return n
}

// ask sends one request line and decodes its answer into v.
func (n *benchNode) ask(b *testing.B, f *e2btest.Front, line string, v any) {
	b.Helper()
	if _, err := io.WriteString(n.in, line+"\n"); err != nil {
		b.Fatalf("bench.mjs: %v\n%s", err, n.stderr.String())
	}
	if !n.out.Scan() {
		b.Fatalf("bench.mjs ended on %q: %v\nstderr:\n%s\nserver stderr:\n%s", line, n.out.Err(), n.stderr.String(), f.Serve.Stderr())
	}
	if err := json.Unmarshal(n.out.Bytes(), v); err != nil {
		b.Fatalf("bench.mjs answered %q: %v", n.out.Text(), err)
	}
}

// loadavg is /proc/loadavg's 1-minute figure.
func loadavg(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func quantile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(len(s)-1, i))]
}

// BenchmarkSDKCreateRunKill: E2B's SDK makes a sandbox from base, runs
// `true` in it (`bash -l -c true`) and kills it; interleaved, in an order
// rotated per iteration, with `hostfork run -- bash -l -c true` (its own
// process: the CLI's start, the registry, a new environment) and bwrap
// running the same, all with the same empty HOME.
func BenchmarkSDKCreateRunKill(b *testing.B) {
	f := e2btest.Start(b, e2btest.Options{})
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		testutil.Skip(b, "bwrap not found (apt-get install bubblewrap)")
	}
	home := b.TempDir()
	n := startBenchNode(b, f, home)
	var warm map[string]float64
	n.ask(b, f, "round", &warm) // the SDK's and the server's first use
	steps := map[string][]float64{}
	peer := func(name string, cmd *exec.Cmd) {
		cmd.Env = append(cmd.Env, "HOME="+home)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		steps[name] = append(steps[name], float64(time.Since(t0).Microseconds())/1000)
	}
	ways := []func(){
		func() {
			var r map[string]float64
			n.ask(b, f, "round", &r)
			for k, v := range r {
				steps[k] = append(steps[k], v)
			}
		},
		func() {
			cmd := f.Command("run", "--stdin", "none", "--", "bash", "-l", "-c", "true")
			peer("hostfork-run", cmd)
		},
		func() {
			cmd := exec.Command(bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "bash", "-l", "-c", "true")
			cmd.Env = os.Environ()
			peer("bwrap", cmd)
		},
	}
	load0 := loadavg(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range ways {
			ways[(i+j)%len(ways)]()
		}
	}
	b.StopTimer()
	load1 := loadavg(b)
	var sum strings.Builder
	for _, k := range []string{"total", "create", "run", "kill", "hostfork-run", "bwrap"} {
		p50, p99 := quantile(steps[k], 0.5), quantile(steps[k], 0.99)
		b.ReportMetric(p50, k+"-p50-ms")
		b.ReportMetric(p99, k+"-p99-ms")
		fmt.Fprintf(&sum, " %s %.1f/%.1f", k, p50, p99)
	}
	total, bw := quantile(steps["total"], 0.5), quantile(steps["bwrap"], 0.5)
	b.ReportMetric(total/bw, "total/bwrap")
	b.ReportMetric(total/quantile(steps["hostfork-run"], 0.5), "total/run")
	b.Logf("n=%d, load %.2f → %.2f; p50/p99 ms:%s", b.N, load0, load1, sum.String())
}

// BenchmarkSDKConcurrent50: 50 sandboxes created at once, each running
// `true`; one iteration is the batch, timed by the SDK's side. Every
// record is then checked complete: one active environment per sandbox,
// holding one command whose leader and tree exited 0, both observed; and
// after the kills, every environment stopped for the user.
func BenchmarkSDKConcurrent50(b *testing.B) {
	f := e2btest.Start(b, e2btest.Options{})
	home := b.TempDir()
	n := startBenchNode(b, f, home)
	var warm map[string]float64
	n.ask(b, f, "round", &warm)
	var batch []float64
	load0 := loadavg(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var r struct {
			MS  float64  `json:"ms"`
			IDs []string `json:"ids"`
		}
		n.ask(b, f, "concurrent 50", &r)
		b.StopTimer()
		batch = append(batch, r.MS)
		checkRecords(b, f, r.IDs, false)
		var k map[string]float64
		n.ask(b, f, "kill "+strings.Join(r.IDs, " "), &k)
		checkRecords(b, f, r.IDs, true)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(quantile(batch, 0.5), "batch-p50-ms")
	b.ReportMetric(quantile(batch, 1), "batch-max-ms")
	b.Logf("n=%d batches of 50, load %.2f → %.2f; ms: %v", b.N, load0, loadavg(b), batch)
}

type benchEnv struct {
	ID         string            `json:"id"`
	State      string            `json:"state"`
	StopReason string            `json:"stop_reason"`
	StoppedAt  *time.Time        `json:"stopped_at"`
	Labels     map[string]string `json:"labels"`
	Commands   []struct {
		ID           string     `json:"id"`
		RecordState  string     `json:"record_state"`
		ExitCode     *int       `json:"exit_code"`
		LeaderState  string     `json:"leader_state"`
		TreeState    string     `json:"tree_state"`
		StartedAt    *time.Time `json:"started_at"`
		TreeExitedAt *time.Time `json:"tree_exited_at"`
	} `json:"commands"`
}

// checkRecords reads every sandbox's records through the CLI (the
// registry, not the server) and fails on any that is incomplete.
func checkRecords(b *testing.B, f *e2btest.Front, ids []string, killed bool) {
	b.Helper()
	out, err := f.CLI("envs", "--all", "--label", "e2b.key=alice", "--json")
	if err != nil {
		b.Fatalf("hostfork envs: %v\n%s", err, out)
	}
	var envs []benchEnv
	if err := json.Unmarshal(out, &envs); err != nil {
		b.Fatal(err)
	}
	bySandbox := map[string][]benchEnv{}
	for _, e := range envs {
		bySandbox[e.Labels["e2b.sandbox"]] = append(bySandbox[e.Labels["e2b.sandbox"]], e)
	}
	if len(ids) != 50 {
		b.Fatalf("%d sandbox ids, want 50", len(ids))
	}
	for _, id := range ids {
		es := bySandbox[id]
		if len(es) != 1 {
			b.Fatalf("sandbox %s: %d environments, want 1", id, len(es))
		}
		e := es[0]
		if len(e.Commands) != 1 {
			b.Fatalf("sandbox %s (env %s): %d commands, want 1", id, e.ID, len(e.Commands))
		}
		c := e.Commands[0]
		if c.RecordState != "exited" || c.ExitCode == nil || *c.ExitCode != 0 || c.LeaderState != "exited" ||
			c.TreeState != "exited" || c.StartedAt == nil || c.TreeExitedAt == nil {
			b.Fatalf("sandbox %s: command %s's record is incomplete: %+v", id, c.ID, c)
		}
		if !killed && e.State != "active" {
			b.Fatalf("sandbox %s: env %s is %s before its kill", id, e.ID, e.State)
		}
		if killed && (e.State != "stopped" || e.StopReason != "user" || e.StoppedAt == nil) {
			b.Fatalf("sandbox %s: env %s after its kill: state %s, reason %q, stopped_at %v", id, e.ID, e.State, e.StopReason, e.StoppedAt)
		}
	}
}

// vmRSS reads a process's VmRSS and VmHWM from /proc/PID/status, in MiB.
func vmRSS(b *testing.B, pid int) (rss, hwm float64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[0], 64)
		switch k {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// BenchmarkSDKLive200: the server's resident memory (VmRSS of hostfork
// serve) with 200 live sandboxes made through the SDK.
func BenchmarkSDKLive200(b *testing.B) {
	f := e2btest.Start(b, e2btest.Options{})
	home := b.TempDir()
	n := startBenchNode(b, f, home)
	var warm map[string]float64
	n.ask(b, f, "round", &warm)
	pid := f.Serve.Cmd.Process.Pid
	idle, _ := vmRSS(b, pid)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var r struct {
			MS  float64  `json:"ms"`
			IDs []string `json:"ids"`
		}
		n.ask(b, f, "live 200", &r)
		b.StopTimer()
		rss, hwm := vmRSS(b, pid)
		out, err := f.CLI("envs", "--label", "e2b.key=alice", "--json")
		if err != nil {
			b.Fatalf("hostfork envs: %v\n%s", err, out)
		}
		var envs []benchEnv
		if err := json.Unmarshal(out, &envs); err != nil {
			b.Fatal(err)
		}
		if len(envs) != 200 {
			b.Fatalf("%d active environments, want 200", len(envs))
		}
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(hwm, "hwm-MiB")
		b.Logf("serve VmRSS: %.1f MiB idle, %.1f MiB with 200 live sandboxes (peak %.1f); made in %.0f ms; load %.2f", idle, rss, hwm, r.MS, loadavg(b))
		var k map[string]float64
		n.ask(b, f, "kill "+strings.Join(r.IDs, " "), &k)
		b.StartTimer()
	}
}

// BenchmarkSDKRoundAB compares this tree's server with a baseline build
// (HOSTFORK_BENCH_BASE_BIN: a hostfork with its hostfork-serve beside it,
// e.g. `git worktree add /tmp/base main && go build -o /tmp/base-bin/
// ./cmd/hostfork ./cmd/hostfork-serve` there), both serving at once, one
// SDK round on each per iteration in a rotated order: the pairs a speed
// change is judged by.
func BenchmarkSDKRoundAB(b *testing.B) {
	base := os.Getenv("HOSTFORK_BENCH_BASE_BIN")
	if base == "" {
		b.Skip("set HOSTFORK_BENCH_BASE_BIN to a baseline hostfork binary")
	}
	fronts := []*e2btest.Front{e2btest.Start(b, e2btest.Options{Bin: base}), e2btest.Start(b, e2btest.Options{})}
	home := b.TempDir()
	nodes := []*benchNode{startBenchNode(b, fronts[0], home), startBenchNode(b, fronts[1], home)}
	steps := []map[string][]float64{{}, {}}
	round := func(i int) {
		var r map[string]float64
		nodes[i].ask(b, fronts[i], "round", &r)
		for k, v := range r {
			steps[i][k] = append(steps[i][k], v)
		}
	}
	round(0)
	round(1)
	steps = []map[string][]float64{{}, {}}
	load0 := loadavg(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round(i % 2)
		round(1 - i%2)
	}
	b.StopTimer()
	var sum strings.Builder
	for _, k := range []string{"total", "create", "run", "kill"} {
		p0, p1 := quantile(steps[0][k], 0.5), quantile(steps[1][k], 0.5)
		b.ReportMetric(p0, k+"-base-p50-ms")
		b.ReportMetric(p1, k+"-p50-ms")
		fmt.Fprintf(&sum, " %s %.2f→%.2f (%.2f, p99 %.1f→%.1f)", k, p0, p1, p1/p0, quantile(steps[0][k], 0.99), quantile(steps[1][k], 0.99))
	}
	b.Logf("%d pairs, load %.2f → %.2f; p50 base→this ms:%s", b.N, load0, loadavg(b), sum.String())
}
