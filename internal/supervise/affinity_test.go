package supervise_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// TestHelperWidensNarrowedAffinity: a guardian spawned from a thread that
// still has the mask the hostfork CLI's start narrowed it to (one CPU,
// named by linux.StartCPU) widens itself before it starts anything, so its
// workload may run on every CPU; a caller that chose one CPU itself keeps
// it for the workload (docs/decisions.md, entry 74).
func TestHelperWidensNarrowedAffinity(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		testutil.Skip(t, fmt.Sprintf("this test needs two CPUs; it may run on %d", all.Count()))
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if all.IsSet(i) {
			cpu = i
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	allowed := func(narrowed bool) string {
		t.Helper()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Fatal(err)
		}
		if narrowed {
			linux.SetStartCPU(cpu)
		}
		h := launch(t, launchOpts{})
		linux.SetStartCPU(-1)
		if err := unix.SchedSetaffinity(0, &all); err != nil {
			t.Fatal(err)
		}
		h.release(h.config("grep", "Cpus_allowed_list", "/proc/self/status"))
		h.next("started", 10*time.Second)
		h.next("leader", 10*time.Second)
		h.next("tree", 10*time.Second)
		h.finish()
		return strings.TrimSpace(strings.TrimPrefix(h.file("stdout"), "Cpus_allowed_list:"))
	}
	var want []string
	for i := 0; i < 1024; i++ {
		if all.IsSet(i) {
			want = append(want, strconv.Itoa(i))
		}
	}
	got := allowed(true)
	if n := strings.Count(got, ",") + strings.Count(got, "-"); got == strconv.Itoa(cpu) || n == 0 {
		t.Errorf("spawned with the narrowed mask: the workload may run on %q, want every CPU (%s)", got, strings.Join(want, ","))
	}
	if got := allowed(false); got != strconv.Itoa(cpu) {
		t.Errorf("spawned from a caller on CPU %d: the workload may run on %q, want %d", cpu, got, cpu)
	}
}
