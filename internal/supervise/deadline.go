package supervise

import (
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/internal/atomicfile"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// A moved deadline (hostfork extend). The guardians and the keeper each
// hold the environment's deadline and enforce it on their own timers; to
// move it, MoveDeadline durably replaces DeadlineFile in the environment's
// run directory, then Poke sends each of them DeadlineSignal, on which they
// read the file again (hf.h, HF_DEADLINE_FILE). A signal sent before Poke
// returns is delivered however soon the mover dies, and a guardian
// released later reads the file at its release, so the new deadline holds
// without the mover. The signal (SIGURG) is ignored by default: a poke
// that reaches a guardian before its constructor blocked it does nothing.
const (
	DeadlineFile   = "deadline"
	DeadlineSignal = syscall.SIGURG
	sigDeadline    = int(DeadlineSignal) // for the C-side check
)

// MoveDeadline records mono (CLOCK_MONOTONIC) as the deadline of the
// environment whose run directory is runDir, atomically. It is not flushed
// to disk: the enforcers that read it live no longer than this boot, and
// the registry holds the deadline durably.
func MoveDeadline(runDir string, mono time.Duration) error {
	if mono <= 0 {
		return fmt.Errorf("moving a deadline to %v: it must be positive", mono)
	}
	return atomicfile.Replace(filepath.Join(runDir, DeadlineFile), []byte(strconv.FormatInt(int64(mono), 10)+"\n"), 0o600)
}

// Poke tells the guardian or keeper id to read a moved deadline. A process
// that is gone is not an error (linux.ErrNoProcess is returned for the
// caller to tell apart).
func Poke(id linux.Identity) error {
	p, err := linux.OpenVerified(id)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Signal(DeadlineSignal)
}
