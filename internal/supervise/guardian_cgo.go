package supervise

// #cgo CFLAGS: -Wall -Wextra
// #include "guardian.h"
import "C"

import (
	"fmt"
	"os"
)

// The guardian's C side (guardian.h) must agree with protocol.go. Each
// pair of constants below overflows uint, and fails to compile, unless the
// two sides are equal.
const (
	_ = uint(fdControl-C.HF_FD_CONTROL) + uint(C.HF_FD_CONTROL-fdControl)
	_ = uint(fdEvents-C.HF_FD_EVENTS) + uint(C.HF_FD_EVENTS-fdEvents)
	_ = uint(fdReceipt-C.HF_FD_RECEIPT) + uint(C.HF_FD_RECEIPT-fdReceipt)
	_ = uint(fdStdin-C.HF_FD_STDIN) + uint(C.HF_FD_STDIN-fdStdin)
	_ = uint(fdStdout-C.HF_FD_STDOUT) + uint(C.HF_FD_STDOUT-fdStdout)
	_ = uint(fdStderr-C.HF_FD_STDERR) + uint(C.HF_FD_STDERR-fdStderr)
	_ = uint(fdFwdOut-C.HF_FD_FWDOUT) + uint(C.HF_FD_FWDOUT-fdFwdOut)
	_ = uint(fdFwdErr-C.HF_FD_FWDERR) + uint(C.HF_FD_FWDERR-fdFwdErr)
	_ = uint(msgRelease-C.HF_MSG_RELEASE) + uint(C.HF_MSG_RELEASE-msgRelease)
	_ = uint(msgSignal-C.HF_MSG_SIGNAL) + uint(C.HF_MSG_SIGNAL-msgSignal)
	_ = uint(msgStop-C.HF_MSG_STOP) + uint(C.HF_MSG_STOP-msgStop)
	_ = uint(maxID-C.HF_MAX_ID) + uint(C.HF_MAX_ID-maxID)
	_ = uint(maxPath-C.HF_MAX_PATH) + uint(C.HF_MAX_PATH-maxPath)
	_ = uint(maxReason-C.HF_MAX_REASON) + uint(C.HF_MAX_REASON-maxReason)
	_ = uint(maxRelease-C.HF_MAX_RELEASE) + uint(C.HF_MAX_RELEASE-maxRelease)
)

// cGuardianMode is the mode string compiled into the C constructor.
func cGuardianMode() string { return C.GoString(C.hf_guardian_mode()) }

// GuardianNotDispatched is what runs if argv[1] is GuardianMode and yet the
// Go runtime started: the C constructor in guardian.c did not run (a libc
// that does not run ELF constructors, or a build without cgo). It reports
// that and fails instead of treating the guardian's arguments as a CLI.
func GuardianNotDispatched() int {
	fmt.Fprintf(os.Stderr, "hostfork guardian: argv[1] is %s but the C guardian constructor (internal/supervise/guardian.c) did not run; this binary can't act as a guardian\n", GuardianMode)
	return 125
}
