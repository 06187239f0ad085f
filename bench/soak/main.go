// Command soak is hostfork's load soak (issue 39): for a given time it
// keeps a store busy with a mixed load, kills CLI calls and the server at
// random, reaps and collects, and reports per minute; at the end it checks
// that nothing was lost or leaked. bench/soak.sh builds the binaries and
// runs it; see docs/benchmarks.md for the figures.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	duration = flag.Duration("duration", 30*time.Minute, "how long the load runs")
	hfPath   = flag.String("hostfork", "", "the hostfork binary (hostfork-serve must lie beside it)")
	workers  = flag.Int("workers", 6, "concurrent CLI callers")
	ttlMax   = flag.Duration("ttl", 3*time.Minute, "longest ttl of a detached environment (ttls are spread over [ttl/3, ttl])")
	gcEvery  = flag.Duration("gc-every", 5*time.Minute, "reap and gc this often")
	chaos    = flag.Duration("chaos-every", time.Minute, "SIGKILL a CLI call or the server this often")
	retain   = flag.Duration("retain", 2*time.Minute, "retention of trees and evidence after a stop")
	timing   = flag.Bool("check-timing", true, "fail when the last minute's p99 is over 1.5x the first's (off for short runs)")
	parent   = flag.String("cgroup-parent", "", "cgroup2 directory to make the soak's parent in (default: the cgroup2 mount)")
)

// soak is one run's state.
type soak struct {
	hf, root, cg, sock string
	env                []string

	mu       sync.Mutex
	live     []string             // detached environments believed live
	started  map[string]bool      // every environment id a CLI call printed
	gcd      map[string]bool      // environments gc deleted
	inflight map[int]*exec.Cmd    // CLI calls running now, by pid
	lat      map[string][]float64 // this minute's latencies (ms) by kind
	counts   map[string]int       // this minute's calls by kind and outcome
	serve    *exec.Cmd
	failures []string
}

func main() {
	flag.Parse()
	if *hfPath == "" {
		fmt.Fprintln(os.Stderr, "soak: -hostfork is required (bench/soak.sh builds it)")
		os.Exit(2)
	}
	s, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	code := s.run()
	s.teardown()
	os.Exit(code)
}

func setup() (*soak, error) {
	hf, err := filepath.Abs(*hfPath)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hostfork-soak-")
	if err != nil {
		return nil, err
	}
	mount := *parent
	if mount == "" {
		mount = cgroup2Mount()
	}
	if mount == "" {
		return nil, fmt.Errorf("no cgroup2 mount; give -cgroup-parent")
	}
	cg := filepath.Join(mount, fmt.Sprintf("hostfork-soak-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		return nil, err
	}
	s := &soak{hf: hf, root: filepath.Join(dir, "store"), cg: cg, started: map[string]bool{}, gcd: map[string]bool{},
		inflight: map[int]*exec.Cmd{}, lat: map[string][]float64{}, counts: map[string]int{}}
	s.sock = filepath.Join(s.root, "api.sock")
	s.env = append(os.Environ(), "HOSTFORK_ROOT="+s.root, "HOSTFORK_CGROUP_PARENT="+cg)
	if out, err := s.cli("create", "--ttl", "10s"); err != nil { // makes the store
		return nil, fmt.Errorf("first create: %v: %s", err, out)
	}
	r := retain.String()
	cfg := "retention:\n  trees: " + r + "\n  evidence: " + r + "\n"
	if err := os.WriteFile(filepath.Join(s.root, "config.yaml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return s, s.startServe()
}

func cgroup2Mount() string {
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d
		}
	}
	return ""
}

func (s *soak) startServe() error {
	cmd := exec.Command(s.hf, "serve", "--socket", s.sock)
	cmd.Env = s.env
	if err := cmd.Start(); err != nil {
		return err
	}
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(s.sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.serve = cmd
	s.mu.Unlock()
	go func() { _ = cmd.Wait() }()
	return nil
}

// cli runs one hostfork call and returns its output.
func (s *soak) cli(args ...string) (string, error) {
	cmd := exec.Command(s.hf, args...)
	cmd.Env = s.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	// The soak's own reap and gc are not chaos targets: what gc reports
	// deleted is how the end tells a collected environment from a lost
	// one (a gc killed after deleting would make those look lost).
	if args[0] != "reap" && args[0] != "gc" {
		s.mu.Lock()
		s.inflight[cmd.Process.Pid] = cmd
		s.mu.Unlock()
	}
	err := cmd.Wait()
	s.mu.Lock()
	delete(s.inflight, cmd.Process.Pid)
	s.mu.Unlock()
	return out.String(), err
}

// killed: the call itself (not its workload) died of SIGKILL.
func killed(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// one runs one call of the mix, timed.
func (s *soak) one(r *rand.Rand) {
	host := []string{}
	via := "direct"
	if r.IntN(2) == 0 {
		host, via = []string{"--host", "unix://" + s.sock}, "serve"
	}
	kind, args, want := "", []string(nil), []int{0}
	switch p := r.IntN(100); {
	case p < 45:
		// Through serve, a run needs its own end if the caller dies.
		kind, args = "run-true/"+via, append(host, "run", "--label", "soak=1", "--ttl", "1m", "--", "true")
	case p < 60:
		env := s.pick(r)
		if env == "" {
			return
		}
		// The environment may have expired or been stopped since, or
		// collected by gc after its ttl (119: not found).
		kind, args, want = "exec-true/"+via, append(host, "exec", env, "--", "true"), []int{0, 1, 3, 4, 119, 122, 124, 143}
	case p < 75:
		ttl := *ttlMax/3 + time.Duration(r.Int64N(int64(*ttlMax*2/3)))
		kind, args = "detach/"+via, append(host, "run", "--detach", "--label", "soak=1", "--ttl", ttl.Round(time.Second).String(), "--", "sleep", "3600")
	case p < 77:
		// A session: a terminal held by its guardian, typed into.
		ttl := *ttlMax/3 + time.Duration(r.Int64N(int64(*ttlMax*2/3)))
		out, err := s.cli("run", "--detach", "--tty", "--label", "soak=1", "--ttl", ttl.Round(time.Second).String(), "--", "cat")
		if err != nil {
			s.mu.Lock()
			if killed(err) {
				s.counts["session killed"]++
			} else {
				s.counts["session unexpected"]++
				fmt.Printf("  unexpected: run --detach --tty: exit %d: %s\n", exitCode(err), firstLines(out, 3))
			}
			s.mu.Unlock()
			return
		}
		id := strings.TrimSpace(out)
		s.mu.Lock()
		s.live = append(s.live, id)
		s.started[id] = true
		s.mu.Unlock()
		// 113: a stop the mix drew took it meanwhile.
		kind, args, want = "session-send", []string{"send", id, "hello\n"}, []int{0, 113}
	case p < 80:
		kind, args, want = "timeout", []string{"run", "--label", "soak=1", "--timeout", "300ms", "--", "sleep", "30"}, []int{124}
	case p < 83:
		kind, args, want = "oom", []string{"run", "--label", "soak=1", "--memory", "32M", "--", "sh", "-c", "head -c 96M /dev/zero | tail -c 96M > /dev/null"}, []int{124, 137}
	case p < 85:
		// A fork: the environment frozen, its trees taken, a child
		// made (no processes are cloned; the child lives out its ttl).
		env := s.pick(r)
		if env == "" {
			return
		}
		kind, args, want = "fork/"+via, append(host, "fork", "--label", "soak=1", "--ttl", "1m", env), []int{0, 3, 4, 119, 122}
	default:
		env := s.take(r)
		if env == "" {
			return
		}
		kind, args, want = "stop/"+via, append(host, "stop", env), []int{0, 3, 4, 119}
	}
	t0 := time.Now()
	out, err := s.cli(args...)
	ms := float64(time.Since(t0).Microseconds()) / 1000
	code := exitCode(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat[kind] = append(s.lat[kind], ms)
	if killed(err) {
		s.counts[kind+" killed"]++ // a chaos SIGKILL of the call itself
		return
	}
	if via == "serve" && code == 125 && strings.Contains(out, "hostfork server") {
		s.counts[kind+" server-down"]++ // the chaos killed serve; it restarts
		return
	}
	if !slices.Contains(want, code) {
		s.counts[kind+" unexpected"]++
		if s.counts[kind+" unexpected"] <= 3 {
			fmt.Printf("  unexpected: %s: exit %d: %s\n", strings.Join(args, " "), code, firstLines(out, 3))
		}
		return
	}
	s.counts[kind]++
	if (strings.HasPrefix(kind, "detach") || strings.HasPrefix(kind, "fork")) && code == 0 {
		id := strings.TrimSpace(out)
		s.live = append(s.live, id)
		s.started[id] = true
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, " | ")
}

// pick returns a random live environment; take also forgets it.
func (s *soak) pick(r *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) == 0 {
		return ""
	}
	return s.live[r.IntN(len(s.live))]
}

func (s *soak) take(r *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) == 0 {
		return ""
	}
	i := r.IntN(len(s.live))
	id := s.live[i]
	s.live = slices.Delete(s.live, i, i+1)
	return id
}

// minute is one line of the report.
type minute struct {
	Minute      int            `json:"minute"`
	Calls       map[string]int `json:"calls"`
	RunP50MS    float64        `json:"run_true_p50_ms"`
	RunP99MS    float64        `json:"run_true_p99_ms"`
	ServeRSSKiB int            `json:"serve_rss_kib"`
	ServeFDs    int            `json:"serve_fds"`
	RegistryKiB int64          `json:"registry_kib"`
	StoreFiles  int            `json:"store_files"`
	Processes   int            `json:"hostfork_processes"`
	LiveEnvs    int            `json:"live_envs"`
	Cgroups     int            `json:"cgroups"`
}

func (s *soak) run() int {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.one(r)
			}
		}(uint64(i))
	}
	start := time.Now()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	chaosT := time.NewTicker(*chaos)
	defer chaosT.Stop()
	gcT := time.NewTicker(*gcEvery)
	defer gcT.Stop()
	r := rand.New(rand.NewPCG(42, uint64(start.UnixNano())))
	var mins []minute
	var collecting sync.Mutex
	end := time.After(*duration)
loop:
	for {
		select {
		case <-end:
			break loop
		case <-chaosT.C:
			s.chaos(r)
		case <-gcT.C:
			// Beside the load, so the per-minute samples keep their beat;
			// one collection at a time.
			if collecting.TryLock() {
				go func() { defer collecting.Unlock(); s.collect() }()
			}
		case <-tick.C:
			m := s.sample(len(mins) + 1)
			mins = append(mins, m)
			b, _ := json.Marshal(m)
			fmt.Println(string(b))
		}
	}
	close(stop)
	wg.Wait()
	collecting.Lock() // a collection in flight ends first
	collecting.Unlock()
	if len(mins) == 0 || time.Since(start)-time.Duration(len(mins))*time.Minute > 10*time.Second {
		m := s.sample(len(mins) + 1)
		mins = append(mins, m)
		b, _ := json.Marshal(m)
		fmt.Println(string(b))
	}
	return s.check(mins)
}

// chaos SIGKILLs a random CLI call this soak started, or the server (which
// it then restarts).
func (s *soak) chaos(r *rand.Rand) {
	s.mu.Lock()
	pids := slices.Collect(maps.Keys(s.inflight))
	serve := s.serve
	s.mu.Unlock()
	if r.IntN(2) == 0 && len(pids) > 0 {
		pid := pids[r.IntN(len(pids))]
		s.mu.Lock()
		cmd := s.inflight[pid]
		s.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL) // our own child, by its handle
			fmt.Printf("  chaos: SIGKILL of the CLI call %d (%s)\n", pid, strings.Join(cmd.Args[1:], " "))
		}
		return
	}
	if serve != nil && serve.Process != nil {
		_ = serve.Process.Signal(syscall.SIGKILL)
		fmt.Printf("  chaos: SIGKILL of serve %d\n", serve.Process.Pid)
		time.Sleep(50 * time.Millisecond)
		_ = os.Remove(s.sock)
		if err := s.startServe(); err != nil {
			s.fail("serve did not restart: %v", err)
		}
	}
}

func (s *soak) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	s.failures = append(s.failures, msg)
	fmt.Println("  FAIL:", msg)
}

// collect runs reap and gc, noting what gc deleted.
func (s *soak) collect() {
	if out, err := s.cli("reap"); err != nil {
		fmt.Printf("  reap: exit %d: %s\n", exitCode(err), firstLines(out, 3))
	}
	out, err := s.cli("gc", "--json")
	if err != nil {
		fmt.Printf("  gc: exit %d: %s\n", exitCode(err), firstLines(out, 3))
	}
	var rep struct {
		Deleted []struct {
			Env  string `json:"env"`
			What string `json:"what"`
		} `json:"deleted"`
	}
	if json.Unmarshal([]byte(out), &rep) == nil {
		s.mu.Lock()
		for _, d := range rep.Deleted {
			if d.What == "evidence" {
				s.gcd[d.Env] = true
			}
		}
		s.mu.Unlock()
	}
}

func (s *soak) sample(n int) minute {
	s.mu.Lock()
	lat := append(append([]float64(nil), s.lat["run-true/direct"]...), s.lat["run-true/serve"]...)
	calls := s.counts
	s.counts, s.lat = map[string]int{}, map[string][]float64{}
	m := minute{Minute: n, Calls: calls, LiveEnvs: len(s.live)}
	serve := s.serve
	s.mu.Unlock()
	slices.Sort(lat)
	m.RunP50MS, m.RunP99MS = pct(lat, 0.50), pct(lat, 0.99)
	if serve != nil && serve.Process != nil {
		m.ServeRSSKiB = statusKiB(serve.Process.Pid, "VmRSS:")
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", serve.Process.Pid))
		m.ServeFDs = len(ents)
	}
	for _, f := range []string{"registry.sqlite", "registry.sqlite-wal"} {
		if st, err := os.Stat(filepath.Join(s.root, f)); err == nil {
			m.RegistryKiB += st.Size() >> 10
		}
	}
	_ = filepath.WalkDir(s.root, func(string, os.DirEntry, error) error { m.StoreFiles++; return nil })
	m.Processes = len(s.ours())
	m.Cgroups = countDirs(s.cg)
	return m
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func statusKiB(pid int, key string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), key) {
			var n int
			fmt.Sscan(strings.TrimSpace(strings.TrimPrefix(sc.Text(), key)), &n)
			return n
		}
	}
	return 0
}

// ours lists the processes running this soak's hostfork binaries
// (guardians and keepers are modes of the hostfork binary).
func (s *soak) ours() []int {
	serveBin := filepath.Join(filepath.Dir(s.hf), "hostfork-serve")
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && (exe == s.hf || exe == serveBin) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func countDirs(root string) int {
	n := 0
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			n++
		}
		return nil
	})
	return n
}

// check stops everything, reaps, and checks what the issue asks: no lost
// record, no leaked group, mount or process, p99 steady, growth bounded.
func (s *soak) check(mins []minute) int {
	if out, err := s.cli("stop", "--all"); err != nil {
		fmt.Printf("  stop --all: exit %d: %s\n", exitCode(err), firstLines(out, 5))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := s.cli("reap")
		left := s.ours()
		s.mu.Lock()
		if s.serve != nil && s.serve.Process != nil {
			left = slices.DeleteFunc(left, func(p int) bool { return p == s.serve.Process.Pid })
		}
		s.mu.Unlock()
		if len(left) == 0 && countDirs(s.cg) == 0 || time.Now().After(deadline) {
			if len(left) > 0 {
				s.fail("%d hostfork processes left after stop --all and reap: %v (%s)", len(left), left, firstLines(out, 3))
			}
			break
		}
		time.Sleep(time.Second)
	}
	if n := countDirs(s.cg); n > 0 {
		s.fail("%d cgroups left under %s", n, s.cg)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, s.root) {
				s.fail("a mount is left: %s", l)
			}
		}
	}
	// Lost records: every command in the registry is final, and every
	// environment a call printed is final or was collected by gc.
	out, err := s.cli("ps", "--all", "--json")
	var cmds []struct {
		ID    string `json:"id"`
		Env   string `json:"env"`
		State string `json:"state"`
	}
	if err != nil || json.Unmarshal([]byte(out), &cmds) != nil {
		s.fail("ps --all --json: %v: %s", err, firstLines(out, 3))
	}
	for _, c := range cmds {
		if c.State != "exited" && c.State != "failed" {
			s.fail("command %s of %s is %s after stop --all and reap", c.ID, c.Env, c.State)
		}
	}
	s.mu.Lock()
	var ids []string
	for id := range s.started {
		if !s.gcd[id] {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	lost := 0
	for _, id := range ids {
		out, err := s.cli("status", "--json", id)
		var env struct {
			State string `json:"state"`
		}
		if err != nil || json.Unmarshal([]byte(out), &env) != nil || (env.State != "stopped" && env.State != "failed") {
			lost++
			if lost <= 5 {
				s.fail("environment %s: state %q (%v): %s", id, env.State, err, firstLines(out, 2))
			}
		}
	}
	fmt.Printf("records: %d environments started detached, %d collected by gc, %d checked, %d lost; %d commands retained, all final\n",
		len(s.started), len(s.gcd), len(ids), lost, len(cmds))
	if len(mins) >= 2 {
		first, last := mins[0], mins[len(mins)-1]
		ratio := 0.0
		if first.RunP99MS > 0 {
			ratio = last.RunP99MS / first.RunP99MS
		}
		fmt.Printf("p99 of run -- true: first minute %.1f ms, last %.1f ms (ratio %.2f)\n", first.RunP99MS, last.RunP99MS, ratio)
		if *timing && ratio > 1.5 {
			s.fail("p99 grew %.2fx from the first minute to the last (limit 1.5x)", ratio)
		}
		// Bounded: once retention has turned over (after 2 retention
		// periods), the last minute is not above 1.5x the steady minute.
		steady := int((2**retain + *gcEvery).Minutes()) + 1
		if steady < len(mins) {
			base := mins[steady-1]
			for _, c := range []struct {
				name      string
				base, end float64
			}{
				{"serve RSS", float64(base.ServeRSSKiB), float64(last.ServeRSSKiB)},
				{"registry size", float64(base.RegistryKiB), float64(last.RegistryKiB)},
				{"store files", float64(base.StoreFiles), float64(last.StoreFiles)},
			} {
				fmt.Printf("%s: minute %d %.0f, last %.0f\n", c.name, steady, c.base, c.end)
				if c.base > 0 && c.end > 1.5*c.base {
					s.fail("%s grew from %.0f (minute %d) to %.0f: not bounded by retention", c.name, c.base, steady, c.end)
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) > 0 {
		fmt.Printf("soak: %d failures\n", len(s.failures))
		return 1
	}
	fmt.Println("soak: passed")
	return 0
}

func (s *soak) teardown() {
	s.mu.Lock()
	serve := s.serve
	s.mu.Unlock()
	if serve != nil && serve.Process != nil {
		_ = serve.Process.Signal(syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond)
		_ = serve.Process.Signal(syscall.SIGKILL)
	}
	_ = os.Remove(s.cg)
	_ = os.RemoveAll(filepath.Dir(s.root))
}
