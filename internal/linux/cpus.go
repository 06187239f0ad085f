package linux

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// AllowedCPUs is the number of CPUs this thread may run on now (its
// affinity mask), else runtime.NumCPU. runtime.NumCPU is the count the
// runtime took when the process started: a long-running server's cpuset
// may have changed since.
func AllowedCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > 0 {
		return set.Count()
	}
	return runtime.NumCPU()
}
