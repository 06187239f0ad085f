package supervise

// #cgo CFLAGS: -Wall -Wextra -O2 -D_GNU_SOURCE
// #include <signal.h>
// #include "hf.h"
import "C"

import (
	"fmt"
	"os"
)

// The C side (hf.h) must agree with protocol.go and keeper.go. Each pair
// of constants below overflows uint, and fails to compile, unless the two
// sides are equal.
const (
	_ = uint(fdControl-C.HF_FD_CONTROL) + uint(C.HF_FD_CONTROL-fdControl)
	_ = uint(fdEvents-C.HF_FD_EVENTS) + uint(C.HF_FD_EVENTS-fdEvents)
	_ = uint(fdReceipt-C.HF_FD_RECEIPT) + uint(C.HF_FD_RECEIPT-fdReceipt)
	_ = uint(fdStdin-C.HF_FD_STDIN) + uint(C.HF_FD_STDIN-fdStdin)
	_ = uint(fdStdout-C.HF_FD_STDOUT) + uint(C.HF_FD_STDOUT-fdStdout)
	_ = uint(fdStderr-C.HF_FD_STDERR) + uint(C.HF_FD_STDERR-fdStderr)
	_ = uint(fdFwdOut-C.HF_FD_FWDOUT) + uint(C.HF_FD_FWDOUT-fdFwdOut)
	_ = uint(fdFwdErr-C.HF_FD_FWDERR) + uint(C.HF_FD_FWDERR-fdFwdErr)
	_ = uint(fdDir-C.HF_FD_DIR) + uint(C.HF_FD_DIR-fdDir)
	_ = uint(fdParent-C.HF_FD_PARENT) + uint(C.HF_FD_PARENT-fdParent)
	_ = uint(kfdConfig-C.HF_KFD_CONFIG) + uint(C.HF_KFD_CONFIG-kfdConfig)
	_ = uint(kfdReady-C.HF_KFD_READY) + uint(C.HF_KFD_READY-kfdReady)
	_ = uint(kfdOwner-C.HF_KFD_OWNER) + uint(C.HF_KFD_OWNER-kfdOwner)
	_ = uint(kfdRunDir-C.HF_KFD_RUNDIR) + uint(C.HF_KFD_RUNDIR-kfdRunDir)
	_ = uint(msgSignal-C.HF_MSG_SIGNAL) + uint(C.HF_MSG_SIGNAL-msgSignal)
	_ = uint(msgStop-C.HF_MSG_STOP) + uint(C.HF_MSG_STOP-msgStop)
	_ = uint(maxID-C.HF_MAX_ID) + uint(C.HF_MAX_ID-maxID)
	_ = uint(maxPath-C.HF_MAX_PATH) + uint(C.HF_MAX_PATH-maxPath)
	_ = uint(maxRelease-C.HF_MAX_RELEASE) + uint(C.HF_MAX_RELEASE-maxRelease)
	_ = uint(maxJoin-C.HF_MAX_JOIN) + uint(C.HF_MAX_JOIN-maxJoin)
	_ = uint(stopNotice-C.HF_STOP_NOTICE) + uint(C.HF_STOP_NOTICE-stopNotice)
	_ = uint(graceShift-C.HF_GRACE_SHIFT) + uint(C.HF_GRACE_SHIFT-graceShift)
	_ = uint(sigDeadline-C.HF_SIG_DEADLINE) + uint(C.HF_SIG_DEADLINE-sigDeadline)
	_ = uint(len(reasonCodes)-1-C.HF_R_MAX) + uint(C.HF_R_MAX-(len(reasonCodes)-1))
)

// cGuardianMode is the guardian's mode string compiled into the C
// constructor.
func cGuardianMode() string { return C.HF_GUARDIAN_MODE }

// NotDispatched is what runs if argv[1] names a helper mode and yet the Go
// runtime started: the C constructor (hf_ctor.c) did not run (a libc that
// does not run ELF constructors). It reports that and fails instead of
// treating the helper's arguments as the program's own.
func NotDispatched(mode string) int {
	fmt.Fprintf(os.Stderr, "hostfork: argv[1] is %s but the C helper constructor (internal/supervise/hf_ctor.c) did not run; this binary can't act as a hostfork helper\n", mode)
	return 125
}

// The C constructor (hf_ctor.c) runs a helper before the Go runtime starts.
// Should it not have run, a helper's argv must still never reach the
// program's own main: this package's init stops it first.
func init() {
	if len(os.Args) > 1 && (os.Args[1] == GuardianMode || os.Args[1] == KeeperMode) {
		os.Exit(NotDispatched(os.Args[1]))
	}
}
