package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// sigblockExec is the command hostfork-sigblock of this test binary: it
// blocks SIGUSR1, SIGUSR2 and SIGWINCH in its thread and executes hostfork
// with its arguments, which then starts with them blocked (execve keeps
// the mask), as under a caller that blocks them.
func sigblockExec() {
	exe, err := os.Executable()
	if err == nil {
		runtime.LockOSThread()
		var set unix.Sigset_t
		for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
			set.Val[(s-1)/64] |= 1 << ((uint(s) - 1) % 64)
		}
		if err = unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err == nil {
			err = unix.Exec(exe, append([]string{"hostfork"}, os.Args[1:]...), os.Environ())
		}
	}
	fmt.Fprintln(os.Stderr, "hostfork-sigblock:", err)
	os.Exit(1)
}
