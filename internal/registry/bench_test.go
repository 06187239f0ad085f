package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// The records of one 'hostfork run --label agent=a1 -- true' as status
// --json showed them (the reader's computed fields are ignored on insert).
const (
	benchEnvJSON = `{"id":"6dfsiafo2n","rev":3,"state":"stopped","created_at":"2026-12-01T21:06:39.126324519Z","boot_id":"8350d79d-56b7-4d04-acba-abf96bfda4e8","purpose":"","labels":{"agent":"a1"},"tier":"cgroup2","cgroup_path":"/sys/fs/cgroup/unified/hfb-test/6dfsiafo2n","cgroup_inode":466627,"run_dir":"/tmp/hfbench/store1/runs/6dfsiafo2n","owner_exit":"stop","owner":{"boot_id":"8350d79d-56b7-4d04-acba-abf96bfda4e8","pid":28315,"start_time":496740},"until_stopped":false,"auto_stop":true,"ttl":"0s","grace":"2s","idle_timeout":"0s","activated_at":"2026-12-01T21:06:39.128515446Z","deadline_at":null,"spec":{"labels":{"agent":"a1"},"lifetime":{"grace":"2s","owner_exit":"stop"},"view":{},"limits":{},"retention":{}},"trees":[],"keeper":null,"stop_reason":"completed","stop_requested_at":"2026-12-01T21:06:39.136540369Z","stopped_at":"2026-12-01T21:06:39.136540369Z","cleanup_errors":[],"error":""}`
	benchCmdJSON = `{"id":"63t9bvn4fl","env":"6dfsiafo2n","rev":3,"record_state":"exited","created_at":"2026-12-01T21:06:39.126486692Z","purpose":"","labels":{"agent":"a1"},"argv":["true"],"cwd":"/tmp/hfbench","output":"pipe","dir":"/tmp/hfbench/store1/runs/6dfsiafo2n/commands/63t9bvn4fl","stdout_path":"/tmp/hfbench/store1/runs/6dfsiafo2n/commands/63t9bvn4fl/stdout","stderr_path":"/tmp/hfbench/store1/runs/6dfsiafo2n/commands/63t9bvn4fl/stderr","env_policy":"inherit","env_keys":[],"tier":"cgroup2","launcher":{"boot_id":"8350d79d-56b7-4d04-acba-abf96bfda4e8","pid":28315,"start_time":496740},"cgroup_path":"/sys/fs/cgroup/unified/hfb-test/6dfsiafo2n/commands/63t9bvn4fl","cgroup_inode":466684,"guardian":{"boot_id":"8350d79d-56b7-4d04-acba-abf96bfda4e8","pid":28322,"start_time":496742},"proof_dev":65024,"proof_ino":10340483,"workload":{"boot_id":"8350d79d-56b7-4d04-acba-abf96bfda4e8","pid":28326,"start_time":496743},"started_at":"2026-12-01T21:06:39.13130282Z","timeout":"0s","exit_code":0,"signal":null,"leader_state":"exited","leader_exited_at":"2026-12-01T21:06:39.135196322Z","tree_state":"exited","tree_exited_at":"2026-12-01T21:06:39.135224725Z","tree_evidence":"guardian receipt (no children left)","stop_reason":"","stopped_by_hostfork":false,"oom":null,"oom_evidence":"","capture":null,"cleanup_errors":[],"error":""}`
)

// seedRuns inserts n retained runs (a stopped environment with one exited
// command each, labels and derived events included) through the Batch
// API, 200 runs per commit. It returns the environment ids.
func seedRuns(tb testing.TB, d *DB, n int) []string {
	tb.Helper()
	envT, cmdT := benchRecords(tb)
	ctx := context.Background()
	base := time.Now().UTC().Add(-time.Duration(n) * time.Second)
	ids := make([]string, 0, n)
	var b Batch
	for i := 0; i < n; i++ {
		e, c := envT, cmdT
		e.ID = fmt.Sprintf("e%09d", i)
		c.ID = fmt.Sprintf("c%09d", i)
		c.Env = e.ID
		e.CreatedAt = base.Add(time.Duration(i) * time.Second)
		c.CreatedAt = e.CreatedAt.Add(time.Millisecond)
		e.RunDir = "/var/lib/hostfork/runs/" + e.ID
		c.Dir = e.RunDir + "/commands/" + c.ID
		c.StdoutPath, c.StderrPath = c.Dir+"/stdout", c.Dir+"/stderr"
		e.Labels = map[string]string{"agent": "a" + strconv.Itoa(i%10)}
		c.Labels = e.Labels
		b.InsertEnv(&e)
		b.InsertCommand(&c)
		ids = append(ids, e.ID)
		if i%200 == 199 || i == n-1 {
			if err := d.Commit(ctx, &b); err != nil {
				tb.Fatal(err)
			}
			b = Batch{}
		}
	}
	return ids
}

// benchRecords are the environment and command of benchEnvJSON and
// benchCmdJSON.
func benchRecords(tb testing.TB) (api.Env, api.Command) {
	tb.Helper()
	var envT api.Env
	var cmdT api.Command
	if err := json.Unmarshal([]byte(benchEnvJSON), &envT); err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal([]byte(benchCmdJSON), &cmdT); err != nil {
		tb.Fatal(err)
	}
	return envT, cmdT
}

// median sorts a copy of v and returns its middle, smallest and largest.
func median(v []float64) (med, lo, hi float64) {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2], v[0], v[len(v)-1]
}

func benchCount(def int) int {
	if v, err := strconv.Atoi(os.Getenv("HOSTFORK_BENCH_RECORDS")); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkListing: the registry's share of 'hostfork ps --all' and 'envs
// --all' over a store of 10,000 retained runs (HOSTFORK_BENCH_RECORDS),
// seeded through the Batch API in the benchmark's temporary directory (on
// the root disk unless TMPDIR says otherwise). Per iteration, interleaved:
//   - commands: one Commands query for all 10,000 rows (labels included);
//   - commands+env-each: that query plus one Env read per command, which
//     is what engine.Commands does to fill each command's deadline;
//   - envs: one Envs query for all;
//   - envs+commands: Envs plus one Commands query for all (envs --all with
//     commands, as engine.Envs reads them past 500 environments).
//
// Medians are reported as ms/<name>; the spread goes to the log.
func BenchmarkListing(b *testing.B) {
	n := benchCount(10000)
	d, err := Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	t0 := time.Now()
	seedRuns(b, d, n)
	b.Logf("seeded %d runs in %v", n, time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	steps := []struct {
		name string
		fn   func() error
	}{
		{"commands", func() error {
			cs, err := d.Commands(ctx, CommandQuery{})
			if err == nil && len(cs) != n {
				err = fmt.Errorf("%d commands", len(cs))
			}
			return err
		}},
		{"commands+env-each", func() error {
			cs, err := d.Commands(ctx, CommandQuery{})
			if err != nil {
				return err
			}
			for _, c := range cs {
				if _, err := d.Env(ctx, c.Env); err != nil {
					return err
				}
			}
			return nil
		}},
		{"envs", func() error {
			es, err := d.Envs(ctx, EnvQuery{})
			if err == nil && len(es) != n {
				err = fmt.Errorf("%d envs", len(es))
			}
			return err
		}},
		{"envs+commands", func() error {
			if _, err := d.Envs(ctx, EnvQuery{}); err != nil {
				return err
			}
			_, err := d.Commands(ctx, CommandQuery{})
			return err
		}},
	}
	times := make([][]float64, len(steps))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range steps {
			j := (k + i) % len(steps)
			t := time.Now()
			if err := steps[j].fn(); err != nil {
				b.Fatal(err)
			}
			times[j] = append(times[j], float64(time.Since(t).Microseconds())/1000)
		}
	}
	b.StopTimer()
	load, _ := os.ReadFile("/proc/loadavg")
	for k, s := range steps {
		med, lo, hi := median(times[k])
		b.ReportMetric(med, "ms/"+s.name)
		b.Logf("%-18s median %8.2f ms  min %8.2f  max %8.2f  n=%d", s.name, med, lo, hi, len(times[k]))
	}
	b.Logf("%d records; load %s", n, load)
}

// BenchmarkResolve: resolving an id as every command naming an
// environment or command does ('exec ENV', 'status ID', 'stop ID', 'logs
// ID', the API's /v1/resolve), over a store of 10,000 retained runs
// (HOSTFORK_BENCH_RECORDS). Per iteration: a whole environment id, a whole
// command id, and a unique prefix of each; medians as µs/<name>.
func BenchmarkResolve(b *testing.B) {
	n := benchCount(10000)
	d, err := Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	seedRuns(b, d, n)
	ctx := context.Background()
	mid := fmt.Sprintf("%09d", n/2)
	cases := []struct{ name, arg, kind, id string }{
		{"env-id", "e" + mid, "env", "e" + mid},
		{"command-id", "c" + mid, "command", "c" + mid},
		{"env-prefix", "e" + mid[:8], "", ""},
		{"command-prefix", "c" + mid[:8], "", ""},
	}
	times := make([][]float64, len(cases))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range cases {
			j := (k + i) % len(cases)
			c := cases[j]
			t := time.Now()
			kind, id, err := d.Resolve(ctx, c.arg)
			el := float64(time.Since(t).Nanoseconds()) / 1000
			if c.kind != "" && (err != nil || kind != c.kind || id != c.id) {
				b.Fatalf("Resolve(%q) = %q %q %v, want %s %s", c.arg, kind, id, err, c.kind, c.id)
			}
			if c.kind == "" && err == nil {
				// a prefix of ten ids is ambiguous
				b.Fatalf("Resolve(%q) = %q %q, want ambiguous", c.arg, kind, id)
			}
			times[j] = append(times[j], el)
		}
	}
	b.StopTimer()
	load, _ := os.ReadFile("/proc/loadavg")
	for k, c := range cases {
		med, _, _ := median(times[k])
		b.ReportMetric(med, "µs/"+c.name)
	}
	b.Logf("%d records; load %s", n, load)
}

// BenchmarkEnvLiveCommands: the query every launch into an environment
// makes (engine.EnvOpen): the environment's commands that are not final,
// in an environment that has run 10,000 commands (HOSTFORK_BENCH_RECORDS),
// one of them still running; median as µs/live.
func BenchmarkEnvLiveCommands(b *testing.B) {
	n := benchCount(10000)
	d, err := Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	envT, cmdT := benchRecords(b)
	ctx := context.Background()
	envT.State = api.EnvActive
	var bt Batch
	bt.InsertEnv(&envT)
	base := time.Now().UTC().Add(-time.Duration(n) * time.Second)
	for i := 0; i < n; i++ {
		c := cmdT
		c.ID = fmt.Sprintf("c%09d", i)
		c.CreatedAt = base.Add(time.Duration(i) * time.Second)
		if i == n/2 {
			c.State = api.CommandRunning
		}
		bt.InsertCommand(&c)
		if i%500 == 499 || i == n-1 {
			if err := d.Commit(ctx, &bt); err != nil {
				b.Fatal(err)
			}
			bt = Batch{}
		}
	}
	live := []api.CommandState{api.CommandReserved, api.CommandRunning, api.CommandUnverified}
	var times []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		cs, err := d.Commands(ctx, CommandQuery{Env: envT.ID, States: live})
		times = append(times, float64(time.Since(t).Nanoseconds())/1000)
		if err != nil || len(cs) != 1 {
			b.Fatalf("%d live commands, %v; want 1", len(cs), err)
		}
	}
	b.StopTimer()
	med, _, _ := median(times)
	b.ReportMetric(med, "µs/live")
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d commands in one environment; load %s", n, load)
}
