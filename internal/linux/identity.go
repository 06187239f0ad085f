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

// BootIDEnv overrides the boot id a test binary believes in, to simulate
// a reboot in recovery tests (records of the "previous boot" must then be
// released without signalling anything). Only a binary that called
// SimulateBootForTests honours it: a production hostfork ignores it
// (issue 39, item 11).
const BootIDEnv = "HOSTFORK_SIMULATED_BOOT_ID"

var simulateBoot bool

// SimulateBootForTests makes this process honour BootIDEnv. Only test
// binaries call it, before anything reads the boot id.
func SimulateBootForTests() { simulateBoot = true }

// BootID returns the kernel's boot id (/proc/sys/kernel/random/boot_id),
// or, in a test binary, the simulated one (BootIDEnv). The value is read
// once per process.
func BootID() (string, error) {
	bootOnce.Do(func() {
		if v := os.Getenv(BootIDEnv); v != "" && simulateBoot {
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
	Threads   int    // field 20, num_threads
	StartTime uint64 // field 22
}

// ReadStat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so fields are counted from the last ')'. It reads through
// one stack buffer with three system calls (os.ReadFile takes six and two
// allocations): tree listings read it for every member.
func ReadStat(pid int) (ProcStat, error) {
	var buf [1024]byte
	n, err := ReadSmall("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return ProcStat{}, ErrNoProcess
		}
		return ProcStat{}, err
	}
	return parseStat(pid, buf[:n])
}

// ReadSmall reads a small file (a /proc or cgroupfs entry) whole into buf
// and returns its length; a file that does not fit gives an error. The
// error wraps the errno (os.ErrNotExist for ENOENT).
func ReadSmall(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	}
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return n, nil
		}
		n += m
	}
	return 0, &os.PathError{Op: "read", Path: path, Err: unix.EFBIG}
}

func parseStat(pid int, b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ProcStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	// Fields from 3 (state) on, separated by single spaces in the
	// kernel's output; runs of white space are tolerated.
	st := ProcStat{PID: pid}
	rest := b[i+2:]
	for field := 3; field <= 22; field++ {
		for len(rest) > 0 && isSpace(rest[0]) {
			rest = rest[1:]
		}
		j := 0
		for j < len(rest) && !isSpace(rest[j]) {
			j++
		}
		if j == 0 {
			return ProcStat{}, fmt.Errorf("short /proc/%d/stat", pid)
		}
		f := rest[:j]
		rest = rest[j:]
		if field == 3 {
			st.State = f[0]
			continue
		}
		if field != 4 && field != 20 && field != 22 {
			continue
		}
		v, err := parseDec(f)
		if err != nil {
			return ProcStat{}, fmt.Errorf("/proc/%d/stat field %d: %w", pid, field, err)
		}
		switch field {
		case 4:
			st.PPID = int(v)
		case 20:
			st.Threads = int(v)
		case 22:
			st.StartTime = v
		}
	}
	return st, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// parseDec parses a non-negative decimal that fits in 62 bits.
func parseDec(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 18 {
		return 0, strconv.ErrRange
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
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
