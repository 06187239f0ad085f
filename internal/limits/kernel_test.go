package limits_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

// helperEnv selects a child mode of the test binary (see TestMain).
const helperEnv = "HOSTFORK_LIMITS_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper runs a child mode. Every mode first waits for one byte on stdin:
// the gate the test opens after the child has joined its groups.
func helper(mode string) int {
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		return 3
	}
	switch mode {
	case "hog":
		// Touch 1 GiB, one MiB at a time, and keep all of it.
		var keep [][]byte
		for range 1024 {
			c := make([]byte, 1<<20)
			for i := 0; i < len(c); i += 4096 {
				c[i] = 1
			}
			keep = append(keep, c)
		}
		fmt.Println("allocated", len(keep), "MiB")
		return 0
	}
	return 2
}

// rig is one environment's limit groups plus a cgroup2 group that the test
// processes are cloned into, so cleanup can kill them all with cgroup.kill.
type rig struct {
	h  *limits.Host
	g  *limits.Group
	v2 string
}

func newRig(t *testing.T, b limits.Budget, need ...limits.Resource) *rig {
	t.Helper()
	testutil.RequireRoot(t)
	parent := testutil.CgroupParent(t)
	h, err := limits.Detect(limits.Config{V2Parent: parent, V1Parent: testutil.UniqueName("hostfork-test"), EnableV2: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range need {
		if s := h.For(r); !s.Available() {
			testutil.Skip(t, fmt.Sprintf("%s limits unavailable: %s", r, s.Reason))
		}
	}
	v2 := filepath.Join(parent, "env")
	if _, err := cgroup.Create(v2); err != nil {
		t.Fatal(err)
	}
	g, err := h.Create("env", v2, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cg := cgroup.Open(v2)
		_ = cg.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cg.WaitEmpty(ctx)
		if err := g.Remove(ctx); err != nil {
			t.Errorf("removing limit groups: %v", err)
		}
		for _, d := range h.V1ParentDirs() {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing test parent: %v", err)
			}
		}
	})
	return &rig{h: h, g: g, v2: v2}
}

// start clones cmd into the rig's cgroup2 group behind a gate on stdin, joins
// it to the v1 groups, verifies the membership in /proc/PID/cgroup and only
// then opens the gate: a workload that escaped its limits (a fork bomb!)
// never starts. The returned channel yields cmd.Wait's result; cleanup kills
// the process by PID.
func (r *rig) start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	fd, err := cgroup.Open(r.v2).OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("pid %d not reaped 10 s after SIGKILL", cmd.Process.Pid)
		}
	})
	// As a launch does: the supervisor's groups (Join), then, as the
	// workload does, the memory group.
	if err := r.g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if d := r.g.V1["memory"]; d != "" {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkMembership(cmd.Process.Pid, r.g); err != nil {
		t.Fatalf("not starting the workload: %v", err)
	}
	if _, err := io.WriteString(gate, "\n"); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	return p
}

// proc is a started test process; err is valid once done is closed.
type proc struct {
	done chan struct{}
	err  error
}

// checkMembership verifies from /proc/PID/cgroup that pid is in every v1
// group of g.
func checkMembership(pid int, g *limits.Group) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	for ctrl, dir := range g.V1 {
		want := "/" + filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir)
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && hasController(f[1], ctrl) {
				found = f[2] == want
				break
			}
		}
		if !found {
			return fmt.Errorf("pid %d is not in %s group %s:\n%s", pid, ctrl, want, b)
		}
	}
	return nil
}

func hasController(list, ctrl string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == ctrl {
			return true
		}
	}
	return false
}

func wait(t *testing.T, p *proc, limit time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(limit):
		t.Fatalf("workload still running after %v", limit)
		return nil
	}
}

func killedBySignal(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func show(p *uint64) string {
	if p == nil {
		return "unknown"
	}
	return strconv.FormatUint(*p, 10)
}

func TestDetectHost(t *testing.T) {
	testutil.RequireRoot(t)
	parent := testutil.CgroupParent(t)
	// A parent of the test's own in the v1 hierarchies: Detect makes it
	// (to prove it can), and the product's default name ("hostfork") is
	// not the test's to leave behind or to remove.
	h, err := limits.Detect(limits.Config{V2Parent: parent, V1Parent: testutil.UniqueName("hostfork-test")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range h.V1ParentDirs() {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing test parent: %v", err)
			}
		}
	})
	for _, s := range h.Support {
		t.Logf("%-6s %-7s dir=%s usage=%q reason=%q", s.Resource, s.Mechanism, s.Dir, s.Usage, s.Reason)
	}
	for _, s := range h.Support {
		if !s.Available() {
			testutil.Skip(t, fmt.Sprintf("%s: %s", s.Resource, s.Reason))
		}
	}
}

func TestCreateIsExclusive(t *testing.T) {
	r := newRig(t, limits.Budget{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 64}, limits.Resources...)
	if _, err := r.h.Create("env", "", limits.Budget{}); !errors.Is(err, limits.ErrExists) {
		t.Fatalf("second Create of the same name: got %v, want ErrExists", err)
	}
	for ctrl, d := range r.g.V1 {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s group damaged by the refused Create: %v", ctrl, err)
		}
	}
	// A name that exists in only one hierarchy (the last one Create makes):
	// the groups already made in the others are rolled back.
	pidsDir := filepath.Join(r.h.For(limits.Pids).Dir, "partial")
	if r.h.For(limits.Pids).Mechanism != limits.Cgroup1 {
		t.Skip("pids is not on cgroup v1 here")
	}
	if err := os.Mkdir(pidsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pidsDir)
	if _, err := r.h.Create("partial", "", limits.Budget{Pids: 10}); !errors.Is(err, limits.ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	for _, d := range r.h.V1ParentDirs() {
		p := filepath.Join(d, "partial")
		if p == pidsDir {
			continue
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by a failed Create (%v)", p, err)
		}
	}
	// Limits were written where the host enforces them.
	for file, want := range map[string]string{
		filepath.Join(r.g.V1["memory"], "memory.limit_in_bytes"): "67108864",
		filepath.Join(r.g.V1["cpu"], "cpu.cfs_quota_us"):         "50000",
		filepath.Join(r.g.V1["cpu"], "cpu.cfs_period_us"):        "100000",
		filepath.Join(r.g.V1["pids"], "pids.max"):                "64",
	} {
		if r.g.Mechanisms[limits.Memory] != limits.Cgroup1 {
			break
		}
		b, err := os.ReadFile(file)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}
}

func TestMemoryHogIsOOMKilled(t *testing.T) {
	r := newRig(t, limits.Budget{MemoryBytes: 64 << 20}, limits.Memory)
	if k, known := r.g.Evidence().Memory.OOMKilled(); !known || k {
		t.Fatalf("fresh group: OOM killed %v, known %v", k, known)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=hog")
	start := time.Now()
	err := wait(t, r.start(t, cmd), 60*time.Second)
	took := time.Since(start)
	if !killedBySignal(err, syscall.SIGKILL) {
		t.Fatalf("hog under 64 MiB: got %v, want SIGKILL", err)
	}
	ev := r.g.Evidence().Memory
	t.Logf("hog killed after %v: source=%s oom_kills=%s ooms=%s limit_hits=%s peak=%s current=%s",
		took.Round(time.Millisecond), ev.Source, show(ev.OOMKills), show(ev.OOMs), show(ev.LimitHits), show(ev.Peak), show(ev.Current))
	if k, known := ev.OOMKilled(); !known || !k {
		t.Fatalf("no OOM kill in the kernel's counters (killed %v, known %v)", k, known)
	}
	if ev.LimitHits != nil && *ev.LimitHits == 0 {
		t.Errorf("limit hits reported as a known 0 after an OOM kill")
	}
	// The page counter may overshoot by a charge batch; it never gets far.
	if ev.Peak == nil || *ev.Peak > 66<<20 || *ev.Peak < 32<<20 {
		t.Errorf("peak %s, want about the 64 MiB limit", show(ev.Peak))
	}
}

func TestKill9IsNotOOM(t *testing.T) {
	r := newRig(t, limits.Budget{MemoryBytes: 64 << 20}, limits.Memory)
	cmd := exec.Command("sh", "-c", "read g; exec sleep 300")
	exited := r.start(t, cmd)
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep never started")
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, exited, 10*time.Second); !killedBySignal(err, syscall.SIGKILL) {
		t.Fatalf("got %v, want SIGKILL", err)
	}
	ev := r.g.Evidence().Memory
	t.Logf("kill -9: oom_kills=%s limit_hits=%s peak=%s", show(ev.OOMKills), show(ev.LimitHits), show(ev.Peak))
	if k, known := ev.OOMKilled(); !known || k {
		t.Fatalf("kill -9 reported as OOM (killed %v, known %v)", k, known)
	}
}

func TestForkBombStaysBounded(t *testing.T) {
	const max = 64
	r := newRig(t, limits.Budget{Pids: max}, limits.Pids)
	// This test process adopts the bomb's orphans and reaps them, so the
	// pids group really drains (instead of waiting for PID 1 to reap).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	// Every process forks forever and never exits on its own.
	cmd := exec.Command("bash", "-c", "read g; f() { while :; do f & f; done; }; f")
	exited := r.start(t, cmd)
	pidsDir := r.g.V1["pids"]
	if pidsDir == "" {
		pidsDir = r.g.V2
	}
	current := func() int {
		b, err := os.ReadFile(filepath.Join(pidsDir, "pids.current"))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	// The tasks really in the group (v1 "tasks", v2 "cgroup.threads").
	tasksFile := filepath.Join(pidsDir, "tasks")
	if _, err := os.Stat(tasksFile); err != nil {
		tasksFile = filepath.Join(pidsDir, "cgroup.threads")
	}
	tasks := func() int {
		b, err := os.ReadFile(tasksFile)
		if err != nil {
			t.Fatal(err)
		}
		return len(strings.Fields(string(b)))
	}
	highest, highestTasks, samples := 0, 0, 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if n := current(); n > highest {
			highest = n
		}
		if n := tasks(); n > highestTasks {
			highestTasks = n
		}
		samples++
	}
	ev := r.g.Evidence().Pids
	t.Logf("fork bomb: highest pids.current %d, highest task count %d over %d samples in 2 s; peak=%s max_events=%s", highest, highestTasks, samples, show(ev.Peak), show(ev.MaxEvents))
	if highestTasks > max {
		t.Errorf("the group held %d tasks, above pids.max %d", highestTasks, max)
	}
	// The kernel charges a fork before it checks the limit and takes the
	// charge back when the fork is refused, so pids.current may read one
	// over the limit per fork in flight (one per CPU), never more.
	if highest > max+runtime.NumCPU() {
		t.Errorf("pids.current reached %d, above pids.max %d plus one fork in flight per CPU", highest, max)
	}
	if highest < max/2 {
		t.Errorf("the bomb only reached %d processes; it didn't run", highest)
	}
	if ev.Peak != nil && *ev.Peak > max {
		t.Errorf("pids.peak %d above %d", *ev.Peak, max)
	}
	if ev.MaxEvents == nil || *ev.MaxEvents == 0 {
		t.Errorf("pids.events max %s, want > 0", show(ev.MaxEvents))
	}

	// Stop it: cgroup.kill on the cgroup2 group, wait for it to be empty,
	// reap the adopted orphans, and watch the pids group drain.
	stopStart := time.Now()
	cg := cgroup.Open(r.v2)
	if err := cg.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.WaitEmpty(ctx); err != nil {
		t.Fatalf("bomb not gone: %v", err)
	}
	empty := time.Since(stopStart)
	if err := wait(t, exited, 10*time.Second); !killedBySignal(err, syscall.SIGKILL) {
		t.Errorf("bomb leader: got %v, want SIGKILL", err)
	}
	reaped := 0
	for current() > 0 {
		if ctx.Err() != nil {
			t.Fatalf("pids.current still %d after the kill", current())
		}
		reaped += reapAdopted(cmd.Process.Pid)
		time.Sleep(time.Millisecond)
	}
	t.Logf("stopped: cgroup empty after %v, pids.current 0 after %v (%d orphans reaped)", empty.Round(time.Microsecond), time.Since(stopStart).Round(time.Microsecond), reaped)
	if err := r.g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.g.Remove(ctx); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	for _, d := range r.g.V1 {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Remove", d)
		}
	}
}

// reapAdopted reaps this process's exited children other than skip (the
// orphans it adopted as a subreaper) and returns how many it reaped.
func reapAdopted(skip int) int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid ...
		if len(f) < 2 || f[1] != strconv.Itoa(self) {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

func TestHalfACPU(t *testing.T) {
	r := newRig(t, limits.Budget{CPUs: 0.5}, limits.CPU)
	r.start(t, exec.Command("sh", "-c", "read g; while :; do :; done"))
	time.Sleep(300 * time.Millisecond) // past startup
	e0, t0 := r.g.Evidence().CPU, time.Now()
	if e0.Usage == nil {
		testutil.Skip(t, "no CPU usage counter for the group: "+r.h.For(limits.CPU).Usage)
	}
	time.Sleep(2 * time.Second)
	e1, t1 := r.g.Evidence().CPU, time.Now()
	used := e1.Usage.D() - e0.Usage.D()
	wall := t1.Sub(t0)
	ratio := used.Seconds() / wall.Seconds()
	t.Logf("busy loop under cpus 0.5: %v of CPU in %v = %.3f cores (from %s); periods=%s throttled=%s throttled_ns=%s",
		used.Round(time.Millisecond), wall.Round(time.Millisecond), ratio, e1.UsageSource, show(e1.Periods), show(e1.Throttled), e1.ThrottledTime)
	if ratio > 0.7 {
		t.Errorf("busy loop got %.3f cores under a 0.5 budget, want at most 0.7", ratio)
	}
	if ratio < 0.3 {
		// Below the budget is only wrong if the quota, not other load on
		// the host, held it back: then nearly every period is throttled.
		if e0.Periods == nil || e1.Periods == nil || e0.Throttled == nil || e1.Throttled == nil {
			t.Errorf("busy loop got %.3f cores under a 0.5 budget, want at least 0.3", ratio)
		} else if dp, dt := *e1.Periods-*e0.Periods, *e1.Throttled-*e0.Throttled; dp == 0 || float64(dt)/float64(dp) > 0.5 {
			t.Errorf("busy loop got %.3f cores under a 0.5 budget while throttled in %d of %d periods: the quota is too tight", ratio, dt, dp)
		} else {
			t.Logf("the host is busy: throttled in only %d of %d periods, so other load held the loop back", dt, dp)
		}
	}
	if e1.Throttled != nil && *e1.Throttled == 0 && ratio >= 0.45 {
		t.Errorf("used %.3f cores and never throttled: the quota is not applied", ratio)
	}
}

func TestRemoveBusyGroup(t *testing.T) {
	r := newRig(t, limits.Budget{Pids: 10}, limits.Pids)
	if r.g.Mechanisms[limits.Pids] != limits.Cgroup1 {
		t.Skip("no cgroup v1 groups to remove here")
	}
	cmd := exec.Command("sh", "-c", "read g; exec sleep 300")
	p := r.start(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.g.Remove(ctx); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("Remove of a populated group: got %v, want EBUSY", err)
	}
	_ = cmd.Process.Kill()
	wait(t, p, 10*time.Second)
	if err := r.g.Remove(context.Background()); err != nil {
		t.Fatalf("Remove after the kill: %v", err)
	}
}
