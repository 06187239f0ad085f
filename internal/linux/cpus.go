package linux

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// AllowedCPUs is the number of CPUs this thread may run on now (its
// affinity mask), else runtime.NumCPU. runtime.NumCPU is the count the
// runtime took when the process started, and the hostfork CLI starts with
// its affinity narrowed to one CPU so that the runtime makes one P
// (docs/decisions.md, entry 74): it reports one there.
func AllowedCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > 0 {
		return set.Count()
	}
	return runtime.NumCPU()
}

// startCPU is the CPU the hostfork CLI's start narrowed its affinity to,
// plus one (0: not narrowed).
var startCPU atomic.Int64

// SetStartCPU records that this program started with its affinity
// narrowed to cpu and widened it again (the hostfork CLI, entry 74), so
// that what it starts can tell a mask left narrowed by a thread made
// during the widening from one a caller chose.
func SetStartCPU(cpu int) { startCPU.Store(int64(cpu) + 1) }

// StartCPU is the CPU SetStartCPU recorded, -1 if none.
func StartCPU() int { return int(startCPU.Load()) - 1 }

// WidenNarrowedThread gives the calling thread every CPU (within its
// cpuset) if it still has the mask the program's start narrowed it to
// (StartCPU). Call it on a locked thread, before starting a process that
// lives on.
func WidenNarrowedThread() {
	cpu := StartCPU()
	if cpu < 0 {
		return
	}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() != 1 || !set.IsSet(cpu) {
		return
	}
	for i := range set {
		set[i] |= ^set[i] // every CPU: the kernel keeps those of the cpuset
	}
	_ = unix.SchedSetaffinity(0, &set)
}
