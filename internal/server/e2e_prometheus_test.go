package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// freePort is a loopback TCP port nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// prometheusServer runs a real Prometheus that scrapes target every
// second, and returns its query URL.
func prometheusServer(t *testing.T, dir, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testutil.Skip(t, "prometheus not found (apt-get install prometheus)")
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: hostfork
    static_configs:
      - targets: [%q]
`, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	return "http://" + addr
}

// promQuery runs an instant PromQL query and returns its vector's values
// by the series' labels (as Prometheus prints them).
func promQuery(t *testing.T, base, q string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%v: %s", err, b)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out[fmt.Sprint(s.Metric)] = v
	}
	return out, nil
}

// promWait polls q until ok accepts its result or the deadline passes.
func promWait(t *testing.T, base, q string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, err := promQuery(t, base, q)
		if err == nil && ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("PromQL %s: %v, %v (waited 90s)", q, got, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func single(m map[string]float64) (float64, bool) {
	if len(m) != 1 {
		return 0, false
	}
	for _, v := range m {
		return v, true
	}
	return 0, false
}

// TestPrometheusKeepsOOMKills: a real Prometheus scrapes --metrics-listen
// while an environment's command is OOM-killed, the environment is
// stopped (its per-environment series end) and serve is restarted; the
// store-level counters are still there and never went down, and
// hostfork_env_info joins the environment's id to its purpose and labels.
func TestPrometheusKeepsOOMKills(t *testing.T) {
	e := servertest.New(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := e.Serve("--metrics-listen", metricsAddr)
	c := newClient(t, s)
	ctx := ctxFor(t, 4*time.Minute)
	prom := prometheusServer(t, e.Dir, metricsAddr)

	env, err := c.CreateEnv(ctx, map[string]any{"purpose": "oom test", "labels": map[string]string{"team.name": "infra"},
		"lifetime": map[string]any{"max_runtime": "5m"}, "limits": map[string]any{"memory": "64M"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), env.ID, client.StopOptions{}) })
	hog, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"/usr/bin/python3", "-c", "x = bytearray(300 << 20); print(len(x))"}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, hog.ID, client.WaitTree)
	if err != nil {
		t.Fatal(err)
	}
	if rec.OOM == nil || !*rec.OOM {
		t.Fatalf("the allocation was not OOM-killed: exit %v signal %v oom %v (%s)", rec.ExitCode, rec.Signal, rec.OOM, rec.OOMEvidence)
	}
	atLeastOne := func(m map[string]float64) bool { v, ok := single(m); return ok && v >= 1 }
	promWait(t, prom, `hostfork_oom_kills_total`, atLeastOne)
	promWait(t, prom, `hostfork_envs_created_total`, atLeastOne)
	promWait(t, prom, `sum(hostfork_commands_finished_total)`, atLeastOne)
	info := promWait(t, prom, `hostfork_env_info{purpose="oom test",label_team_name="infra"}`, func(m map[string]float64) bool { return len(m) == 1 })
	for k := range info {
		if !strings.Contains(k, "env:"+env.ID) {
			t.Fatalf("hostfork_env_info: %s, want env %s", k, env.ID)
		}
	}
	// The join: the environment's OOM kills by its purpose, while it lives.
	promWait(t, prom, `hostfork_env_oom_kills_total * on (env) group_left (purpose) hostfork_env_info{purpose="oom test"}`, atLeastOne)

	if _, err := c.StopEnv(ctx, env.ID, client.StopOptions{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	// A scrape after the stop: the environment's own series are gone
	// (Prometheus marked them stale).
	promWait(t, prom, fmt.Sprintf(`absent(hostfork_env_oom_kills_total{env=%q})`, env.ID), atLeastOne)

	// A new serve over the same store, on the same metrics address.
	if err := s.Stop(t); err != nil {
		t.Fatal(err)
	}
	restarted := float64(time.Now().Unix())
	e.Serve("--metrics-listen", metricsAddr)
	promWait(t, prom, `process_start_time_seconds{job="hostfork"}`, func(m map[string]float64) bool {
		v, ok := single(m)
		return ok && v >= restarted-1
	})
	// Scraped since the restart, and never dropped over the whole test.
	if v, ok := single(promWait(t, prom, `hostfork_oom_kills_total`, atLeastOne)); !ok || v < 1 {
		t.Fatalf("hostfork_oom_kills_total after the stop and the restart: %v", v)
	}
	for _, q := range []string{`resets(hostfork_oom_kills_total[10m])`, `resets(hostfork_envs_created_total[10m])`,
		`sum(resets(hostfork_commands_finished_total[10m]))`} {
		if v, ok := single(promWait(t, prom, q, func(m map[string]float64) bool { return len(m) == 1 })); !ok || v != 0 {
			t.Errorf("PromQL %s: %v, want 0 (the counter went down)", q, v)
		}
	}
}
