// Package fault provides fault points for crash testing: at a named point,
// a process whose HOSTFORK_FAULT environment variable names that point
// kills itself with SIGKILL, exactly as a crash would, leaving whatever it
// had half-done for the reaper. With the variable unset a point costs one
// string comparison. Library code calls Point between ledger writes and OS
// mutations; only tests set the variable.
package fault

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"time"
)

// Env is the variable that arms a fault point. Its value is a point name,
// optionally "name@N" to fire on the N-th time the point is reached
// (counting from 1) in this process, or "name~DURATION" to pause there
// (for tests that must act while a process stands at that point).
const Env = "HOSTFORK_FAULT"

// ReachedEnv names a file that a pause ("name~DURATION") makes when its
// point is reached, before it sleeps: a test waits for it instead of
// guessing how long the process takes to get there, and removes it to end
// the pause (DURATION is then only a bound), so that what the test does
// meanwhile is not raced by the pause's end however slow it is.
const ReachedEnv = "HOSTFORK_FAULT_REACHED"

// The fault points, in the order a launch meets them.
const (
	CreateRecorded     = "create-recorded"     // env + intents recorded, nothing made
	CreateCgroup       = "create-cgroup"       // env cgroup made, not yet recorded
	TreePrepared       = "tree-prepared"       // a tree exists, its identity not recorded
	KeeperStarted      = "keeper-started"      // keeper running, not yet recorded
	CommandReserved    = "command-reserved"    // command row + intents recorded
	GuardianStarted    = "guardian-started"    // guardian at the gate, not registered
	GuardianRegistered = "guardian-registered" // registered, gate not released
	Released           = "released"            // workload released
	StopRecorded       = "stop-recorded"       // stop decision recorded, nothing killed
	StopKilled         = "stop-killed"         // tree killed, not yet finalized
	Finalize           = "finalize"            // env cgroup removed, record not final
	GCDelete           = "gc-delete"           // deletion decided, files partly gone
	// A fork (Engine.Fork): the children and the freeze intent recorded,
	// nothing made; the parent's commands frozen, no tree taken; a
	// child's tree taken, its identity not recorded (the parent still
	// frozen, for the first child; the others are taken after the thaw);
	// the parent thawed, the children not yet built.
	ForkRecorded  = "fork-recorded"
	ForkFrozen    = "fork-frozen"
	ForkTreeTaken = "fork-tree-taken"
	ForkThawed    = "fork-thawed"
	// ExportCopying: an export marked in progress, its source (an
	// overlay's temporary view) ready, nothing copied. Not a launch point,
	// so not in All.
	ExportCopying = "export-copying"
	// LaunchResolved: an exec found its environment active and resolved
	// its program, nothing made yet (a pause point for the race with the
	// environment's stop; nothing is left to settle, so not in All).
	LaunchResolved = "launch-resolved"
)

// All lists every point of a launch and its stop, for test matrices.
var All = []string{CreateRecorded, CreateCgroup, TreePrepared, KeeperStarted, CommandReserved, GuardianStarted,
	GuardianRegistered, Released, StopRecorded, StopKilled, Finalize, GCDelete,
	ForkRecorded, ForkFrozen, ForkTreeTaken, ForkThawed}

var (
	armed = os.Getenv(Env)
	count int
)

// Point kills the process if the armed fault names this point.
func Point(name string) {
	if armed == "" {
		return
	}
	if i := strings.IndexByte(armed, '~'); i > 0 {
		if armed[:i] == name {
			if d, err := time.ParseDuration(armed[i+1:]); err == nil {
				pause(d, os.Getenv(ReachedEnv))
			}
		}
		return
	}
	want, nth := armed, 1
	if i := strings.IndexByte(armed, '@'); i > 0 {
		want = armed[:i]
		n := 0
		for _, c := range armed[i+1:] {
			if c < '0' || c > '9' {
				return
			}
			n = n*10 + int(c-'0')
		}
		nth = n
	}
	if want != name {
		return
	}
	count++
	if count == nth {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}

// pause stands at a point for d, or, with a reached file made, until the
// file is removed (at most d).
func pause(d time.Duration, reached string) {
	if reached == "" || os.WriteFile(reached, nil, 0o600) != nil {
		time.Sleep(d)
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Lstat(reached); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
}
