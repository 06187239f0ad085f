package linux

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNoProcess reports that no process with the requested identity exists.
var ErrNoProcess = errors.New("no such process")

// ErrIdentityMismatch reports that a PID is now used by a different process
// than the one recorded (PID reuse), or by a process of another boot.
var ErrIdentityMismatch = errors.New("process identity does not match the record")

var (
	bootOnce sync.Once
	bootID   string
	bootErr  error
)

// BootIDEnv overrides the boot id this process believes in. It exists
// to simulate a reboot in recovery tests (records of the "previous boot"
// must then be released without signalling anything); never set it in
// production.
const BootIDEnv = "HOSTFORK_SIMULATED_BOOT_ID"

// BootID returns the kernel's boot id (/proc/sys/kernel/random/boot_id),
// or the simulated one (BootIDEnv). The value is read once per process.
func BootID() (string, error) {
	bootOnce.Do(func() {
		if v := os.Getenv(BootIDEnv); v != "" {
			bootID = v
			return
		}
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			bootErr = fmt.Errorf("reading boot id: %w", err)
			return
		}
		bootID = strings.TrimSpace(string(b))
	})
	return bootID, bootErr
}

// Identity names one process across PID reuse and reboots.
type Identity struct {
	BootID    string `json:"boot_id"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // /proc/PID/stat field 22, clock ticks since boot
}

// Valid reports whether every field of the identity is set.
func (id Identity) Valid() bool { return id.BootID != "" && id.PID > 0 && id.StartTime > 0 }

func (id Identity) String() string {
	return fmt.Sprintf("pid %d (start %d, boot %.8s)", id.PID, id.StartTime, id.BootID)
}

// ProcStat is the part of /proc/PID/stat hostfork uses.
type ProcStat struct {
	PID       int
	State     byte
	PPID      int
	StartTime uint64
}

// ReadStat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so fields are counted from the last ')'.
func ReadStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return ProcStat{}, ErrNoProcess
		}
		return ProcStat{}, err
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ProcStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 {
		return ProcStat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat ppid: %w", pid, err)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat starttime: %w", pid, err)
	}
	return ProcStat{PID: pid, State: f[0][0], PPID: ppid, StartTime: st}, nil
}

// IdentityOf reads the current identity of pid.
func IdentityOf(pid int) (Identity, error) {
	boot, err := BootID()
	if err != nil {
		return Identity{}, err
	}
	st, err := ReadStat(pid)
	if err != nil {
		return Identity{}, err
	}
	return Identity{BootID: boot, PID: pid, StartTime: st.StartTime}, nil
}

// Liveness is the three-valued answer to "is this recorded process alive".
type Liveness int

const (
	// Unverified: the evidence can't prove either answer.
	Unverified Liveness = iota
	// Alive: the exact recorded process exists now.
	Alive
	// Gone: the recorded process no longer exists (its PID is free or used
	// by another process, or the boot changed).
	Gone
)

func (l Liveness) String() string {
	switch l {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unverified"
}

// Assess checks a recorded identity against the running system. A record
// from another boot is Gone without looking at any PID.
func Assess(id Identity) Liveness {
	if !id.Valid() {
		return Unverified
	}
	boot, err := BootID()
	if err != nil {
		return Unverified
	}
	if boot != id.BootID {
		return Gone
	}
	st, err := ReadStat(id.PID)
	if errors.Is(err, ErrNoProcess) {
		return Gone
	}
	if err != nil {
		return Unverified
	}
	if st.StartTime != id.StartTime {
		return Gone
	}
	if st.State == 'Z' || st.State == 'X' {
		return Gone
	}
	return Alive
}
