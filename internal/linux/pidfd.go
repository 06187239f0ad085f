package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pidfd is an open pidfd bound to a verified identity.
type Pidfd struct {
	fd int
	ID Identity
}

// OpenVerified opens a pidfd for id.PID and then re-reads the start time, so
// that the descriptor is known to refer to the recorded process and not to a
// later user of the same PID. It returns ErrNoProcess or ErrIdentityMismatch
// when the recorded process is gone.
func OpenVerified(id Identity) (*Pidfd, error) {
	boot, err := BootID()
	if err != nil {
		return nil, err
	}
	if id.BootID != boot {
		return nil, fmt.Errorf("%v: recorded in boot %.8s, now boot %.8s: %w", id, id.BootID, boot, ErrIdentityMismatch)
	}
	fd, err := IgnoringEINTR2(func() (int, error) { return unix.PidfdOpen(id.PID, 0) })
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, ErrNoProcess
		}
		return nil, os.NewSyscallError("pidfd_open", err)
	}
	// The pidfd pins the process: its PID can't be reused while we hold it,
	// so a start time read now belongs to the process the fd refers to.
	st, err := ReadStat(id.PID)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.StartTime != id.StartTime {
		unix.Close(fd)
		return nil, fmt.Errorf("%v: PID now has start time %d: %w", id, st.StartTime, ErrIdentityMismatch)
	}
	return &Pidfd{fd: fd, ID: id}, nil
}

// WaitExit waits until the process has exited (its pidfd is readable), at
// most limit and while ctx lasts, looking every 50 ms; it reports whether
// the process exited.
func (p *Pidfd) WaitExit(ctx context.Context, limit time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	end := time.Now().Add(limit)
	for time.Now().Before(end) && ctx.Err() == nil {
		if n, _ := unix.Poll(fds, 50); n > 0 {
			return true
		}
	}
	return false
}

// Signal sends sig through the pidfd. A process that already exited gives
// ErrNoProcess.
func (p *Pidfd) Signal(sig syscall.Signal) error { return p.send(sig, nil) }

// send is pidfd_send_signal(2) with info (nil: filled in as kill(2) does).
func (p *Pidfd) send(sig syscall.Signal, info *unix.Siginfo) error {
	err := IgnoringEINTR(func() error { return unix.PidfdSendSignal(p.fd, sig, info, 0) })
	if errors.Is(err, unix.ESRCH) {
		return ErrNoProcess
	}
	return os.NewSyscallError("pidfd_send_signal", err)
}

// Fd returns the descriptor, for polling.
func (p *Pidfd) Fd() int { return p.fd }

// Close releases the descriptor.
func (p *Pidfd) Close() error {
	if p == nil || p.fd < 0 {
		return nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}

// SignalVerified opens a pidfd for id, verifies it and signals through it.
func SignalVerified(id Identity, sig syscall.Signal) error {
	p, err := OpenVerified(id)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Signal(sig)
}

// siginfoQueue is the head of a siginfo_t for a queued signal (si_code
// SI_QUEUE): si_pid, si_uid and si_value follow the first four words.
type siginfoQueue struct {
	Signo int32
	Errno int32
	Code  int32
	_     int32
	Pid   int32
	Uid   uint32
	Value int64
	_     [96]byte
}

// siQueue is SI_QUEUE, the si_code of sigqueue(3).
const siQueue = -1

// SignalValue sends sig with value as its si_value (a queued signal, as
// sigqueue(3) sends; the receiver reads it from its signalfd's ssi_int).
func (p *Pidfd) SignalValue(sig syscall.Signal, value int32) error {
	q := siginfoQueue{Signo: int32(sig), Code: siQueue, Pid: int32(os.Getpid()), Uid: uint32(os.Getuid()), Value: int64(value)}
	return p.send(sig, (*unix.Siginfo)(unsafe.Pointer(&q)))
}

// OpenRoot opens the process's root directory, /proc/PID/root (O_PATH):
// the root of its mount namespace, through which paths resolve as the
// process sees them. The pidfd is checked after the open: the process was
// alive then, so the PID could not have named another process when
// /proc/PID/root was opened. A process that is gone gives ErrNoProcess.
func (p *Pidfd) OpenRoot() (*os.File, error) {
	name := fmt.Sprintf("/proc/%d/root", p.ID.PID)
	fd, err := IgnoringEINTR2(func() (int, error) {
		return unix.Open(name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, ErrNoProcess
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	if err := p.Signal(0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
