package linux

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A thread's timer slack (PR_SET_TIMERSLACK) is inherited by the threads
// and processes it makes and kept across exec. The hostfork CLI raises
// its own for its Go runtime's sake (docs/decisions.md, entry 72) and
// records here the slack it was started with, so that what it starts
// that lives on (its helpers, the commands, a login shell's daemons, the
// companion server) gets the caller's slack back instead of the raise.

var callerSlack atomic.Uint64

// SetCallerTimerSlack records ns, the timer slack the program started
// with before it raised its own (0 forgets it).
func SetCallerTimerSlack(ns uint64) { callerSlack.Store(ns) }

// CallerTimerSlack is the slack SetCallerTimerSlack recorded, 0 if none:
// the program did not raise its own.
func CallerTimerSlack() uint64 { return callerSlack.Load() }

// WithCallerTimerSlack runs fn, which starts a process (or executes one
// in place of this one), on a thread whose timer slack is the caller's
// (when one was recorded), and puts the thread's own back afterwards. The
// thread is also widened if the program's start left it narrowed
// (WidenNarrowedThread).
func WithCallerTimerSlack(fn func() error) error {
	ns := callerSlack.Load()
	if ns == 0 && StartCPU() < 0 {
		return fn()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	WidenNarrowedThread()
	if ns == 0 {
		return fn()
	}
	prev, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || prev <= 0 || unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0) != nil {
		return fn()
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(prev), 0, 0, 0) //nolint:errcheck // the thread keeps the caller's slack at worst
	return fn()
}
