package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// slackExec is the command hostfork-slack of this test binary: 'hostfork-
// slack NS ARGS...' sets its thread's timer slack to NS and executes this
// binary as 'hostfork ARGS...', which starts with that slack (a process
// inherits the slack of the thread that made it, and keeps it across
// exec), as from a caller whose slack is NS (testdata/script/timerslack.txtar).
func slackExec() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: hostfork-slack NS ARGS...")
		os.Exit(2)
	}
	ns, err := strconv.ParseUint(os.Args[1], 10, 64)
	if err != nil || ns == 0 {
		fmt.Fprintln(os.Stderr, "hostfork-slack: NS must be a positive number of nanoseconds")
		os.Exit(2)
	}
	exe, err := os.Executable()
	if err == nil {
		runtime.LockOSThread()
		if err = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0); err == nil {
			err = unix.Exec(exe, append([]string{"hostfork"}, os.Args[2:]...), os.Environ())
		}
	}
	fmt.Fprintln(os.Stderr, "hostfork-slack:", err)
	os.Exit(1)
}
