package supervise

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is a helper process (guardian or keeper) started by spawn: our
// unreaped child, with the pidfd clone(2) returned for it.
//
// spawn calls syscall.StartProcess rather than os.StartProcess (or
// os/exec): the first os.StartProcess in a process probes pidfd support
// with a pidfd_open, a waitid, a pidfd_send_signal and a vfork'd child
// that exits at once, which put 0.25–0.4 ms on the start of every run's
// and exec's guardian (decision 62). The clone's own pidfd is asked for
// instead, so the probe's question is answered by the clone that matters.
type child struct {
	pid int

	mu     sync.Mutex
	pidfd  int  // -1 once closed
	reaped bool // the child is being or was waited for
	status syscall.WaitStatus
	err    error // of wait4: the status is not known then
	done   chan struct{}
}

// spawnSpec says how to start a child. files are its descriptors 0, 1,
// 2, …; a nil entry is closed in the child. The environment is empty.
type spawnSpec struct {
	path     string
	args     []string
	files    []*os.File
	setsid   bool
	cgroupFD int // cloned into this cgroup2 directory when >= 0
}

// devNulls opens /dev/null for reading and for writing: a helper's own
// descriptors 0 and 1 (and 2 without a log). The caller closes both once
// the helper is started.
func devNulls() (r, w *os.File, err error) {
	if r, err = os.Open(os.DevNull); err != nil {
		return nil, nil, err
	}
	if w, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, w, nil
}

func spawn(s spawnSpec) (*child, error) {
	fds := make([]uintptr, len(s.files))
	for i, f := range s.files {
		if f == nil {
			fds[i] = ^uintptr(0)
			continue
		}
		fds[i] = f.Fd()
	}
	pidfd := -1
	sys := &syscall.SysProcAttr{Setsid: s.setsid, PidFD: &pidfd}
	if s.cgroupFD >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = s.cgroupFD
	}
	pid, _, err := syscall.StartProcess(s.path, s.args, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: sys})
	runtime.KeepAlive(s.files)
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: s.path, Err: err}
	}
	if pidfd < 0 {
		// A kernel that ignored CLONE_PIDFD: the child runs (blocked on
		// descriptors we still hold), so kill and reap it rather than
		// leave a zombie, and refuse: a pidfd is required. Our unreaped
		// child's PID can't have been reused.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = wait4(pid)
		return nil, &os.PathError{Op: "fork/exec", Path: s.path, Err: errors.New("the kernel returned no pidfd for the child (Linux 5.3 or later is required)")}
	}
	return &child{pid: pid, pidfd: pidfd, done: make(chan struct{})}, nil
}

// wait reaps the child once and returns its status; every caller
// (concurrent ones too) returns after the reap. The pidfd is closed then.
// An error (ECHILD where SIGCHLD is ignored and the kernel reaped it)
// means the status was not observed.
func (c *child) wait() (syscall.WaitStatus, error) {
	c.mu.Lock()
	if c.reaped {
		c.mu.Unlock()
		<-c.done
		return c.status, c.err
	}
	c.reaped = true
	c.mu.Unlock()
	ws, err := wait4(c.pid)
	c.mu.Lock()
	c.status, c.err = ws, err
	unix.Close(c.pidfd)
	c.pidfd = -1
	c.mu.Unlock()
	close(c.done)
	return ws, err
}

// kill sends SIGKILL through the pidfd while the child is not yet reaped:
// the descriptor refers to this child alone, so a reused PID is never
// signalled.
func (c *child) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pidfd >= 0 {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
	}
}

func wait4(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return ws, err
		}
	}
}
