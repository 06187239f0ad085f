package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// printAffinity is the command hostfork-affinity of this test binary: it
// prints whether the constructor narrowed the CPU affinity (1 or 0),
// whether it still is narrowed, runtime.NumCPU (the count the runtime
// started with), GOMAXPROCS, and the CPUs the main thread may run on
// now, and exits.
func printAffinity() {
	narrowed, still := affinityNarrowed()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	fmt.Println(b(narrowed), b(still), runtime.NumCPU(), runtime.GOMAXPROCS(0), set.Count())
	os.Exit(0)
}

// withoutGoEnv is the test's environment without GOMAXPROCS and GODEBUG.
func withoutGoEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") && !strings.HasPrefix(kv, "GODEBUG=") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// onCPUs runs start on a locked thread whose affinity is cpus (nil: the
// thread's own), so that the process it starts inherits that mask, and
// gives the thread its mask back.
func onCPUs(t *testing.T, cpus *unix.CPUSet, start func() error) error {
	t.Helper()
	if cpus == nil {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var prev unix.CPUSet
	if err := unix.SchedGetaffinity(0, &prev); err != nil {
		t.Fatal(err)
	}
	if err := unix.SchedSetaffinity(0, cpus); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.SchedSetaffinity(0, &prev); err != nil {
			t.Fatal(err)
		}
	}()
	return start()
}

// allowedList is a task's Cpus_allowed_list from its status file.
func allowedList(statusPath string) (string, error) {
	b, err := os.ReadFile(statusPath)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no Cpus_allowed_list in %s", statusPath)
}

// TestStartAffinity: the CLI's constructor narrows the main thread's CPU
// affinity to one CPU, so that the Go runtime starts with one P, and
// package main's first initialiser gives every thread the caller's mask
// back (decision 74). GOMAXPROCS in the environment, or a caller's mask
// of one CPU, leaves the affinity alone. While a run lasts, every thread
// of the CLI, its guardian and its workload have the caller's mask; the
// CLI counts the caller's CPUs (capacity) although runtime.NumCPU says one.
func TestStartAffinity(t *testing.T) {
	c := newCLI(t)
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	var one unix.CPUSet
	one.Set(firstCPU(&mine))
	type start struct{ narrowed, still, numCPU, procs, allowed int }
	atStart := func(cpus *unix.CPUSet, env ...string) start {
		t.Helper()
		cmd := &exec.Cmd{Path: c.exe, Args: []string{"hostfork-affinity"}, Env: append(withoutGoEnv(os.Environ()), env...)}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := onCPUs(t, cpus, cmd.Run); err != nil {
			t.Fatalf("hostfork-affinity %v: %v\n%s", env, err, out.String())
		}
		var s start
		if _, err := fmt.Sscan(out.String(), &s.narrowed, &s.still, &s.numCPU, &s.procs, &s.allowed); err != nil {
			t.Fatalf("hostfork-affinity %v printed %q: %v", env, out.String(), err)
		}
		return s
	}

	n := mine.Count()
	if n >= 2 {
		if got, want := atStart(nil), (start{1, 0, 1, 1, n}); got != want {
			t.Errorf("narrowed, still, NumCPU, GOMAXPROCS, allowed = %v, want %v", got, want)
		}
		if got, want := atStart(nil, "GOMAXPROCS="), (start{1, 0, 1, 1, n}); got != want {
			t.Errorf("with GOMAXPROCS empty: %v, want %v (empty counts as unset)", got, want)
		}
	} else {
		msg := fmt.Sprintf("this test runs on %d CPU: the narrowing is not exercised", n)
		if testutil.Strict() {
			t.Fatalf("HOSTFORK_TEST_STRICT=1 and %s", msg)
		}
		t.Log(msg)
	}
	if got, want := atStart(nil, "GOMAXPROCS=2"), (start{0, 0, n, 2, n}); got != want {
		t.Errorf("with GOMAXPROCS=2: %v, want %v (the user's choice, no narrowing)", got, want)
	}
	if got, want := atStart(&one, "GOMAXPROCS="), (start{0, 0, 1, 1, 1}); got != want {
		t.Errorf("started on one CPU: %v, want %v (nothing to narrow)", got, want)
	}

	// A run from a caller with every CPU, and from one with one CPU.
	for _, cpus := range []*unix.CPUSet{nil, &one} {
		want, err := allowedList("/proc/thread-self/status")
		if err != nil {
			t.Fatal(err)
		}
		if cpus != nil {
			want = strconv.Itoa(firstCPU(cpus))
		}
		cmd := c.command("run", "--", "sleep", "2")
		cmd.Env = withoutGoEnv(cmd.Env)
		if err := onCPUs(t, cpus, cmd.Start); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		pid := cmd.Process.Pid
		// The guardian and its workload: the CLI's child, and its child.
		var procs []int
		hasWorkload := func() bool {
			for _, p := range procs {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(b)) == "sleep" {
					return true
				}
			}
			return false
		}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if procs = descendants(pid); len(procs) >= 2 && hasWorkload() {
				break
			}
		}
		if len(procs) < 2 || !hasWorkload() {
			t.Fatalf("the run's guardian and workload did not appear (found %v)", procs)
		}
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of the CLI: %v %v", tasks, err)
		}
		for _, p := range procs {
			tasks = append(tasks, fmt.Sprintf("/proc/%d/status", p))
		}
		for _, st := range tasks {
			got, err := allowedList(st)
			if err != nil {
				continue // ended meanwhile
			}
			if got != want {
				t.Errorf("caller on %s: %s may run on %s", want, st, got)
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("hostfork run: %v", err)
		}
	}

	// The CLI counts the CPUs it may run on, not runtime.NumCPU.
	cmd := c.command("capacity", "--json")
	cmd.Env = withoutGoEnv(cmd.Env)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hostfork capacity --json: %v", err)
	}
	if want := fmt.Sprintf(`"cores": %d`, n); !strings.Contains(string(out), want) {
		t.Errorf("hostfork capacity --json: want %s in\n%s", want, out)
	}
}

func firstCPU(s *unix.CPUSet) int {
	for cpu := 0; cpu < 1024; cpu++ {
		if s.IsSet(cpu) {
			return cpu
		}
	}
	return -1
}

// childrenOf lists the PIDs of pid's children (of all its threads).
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// descendants lists the PIDs of pid's children and their children.
func descendants(pid int) []int {
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		kids := childrenOf(queue[0])
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out
}
