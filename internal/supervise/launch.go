package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// StartSpec says how to start one guardian.
type StartSpec struct {
	// Exe is hostfork's own executable (re-executed in guardian mode).
	Exe string
	// GuardianCgroup is the cgroup2 directory the guardian is cloned into
	// (empty in the subreaper tier).
	GuardianCgroup string
	// Receipt is the proof/receipt file, created exclusively by the caller.
	Receipt *os.File
	// Stdin, Stdout, Stderr are handed to the workload (files or inherited
	// descriptors). Nil stdin is /dev/null.
	Stdin, Stdout, Stderr *os.File
	// Forward asks for pipe mode: the guardian tees the output to the
	// files above and to pipes returned in Guardian.Forward*.
	Forward bool
	// Dir is the command's directory: the guardian creates guardian.log
	// there on its first diagnostic. Nil: diagnostics go to Log.
	Dir *os.File
	// Parent, with Dir nil, is the directory the command's directory will
	// be made in before the release (named by the command id): the
	// guardian opens it there after the release.
	Parent *os.File
	// Log receives the guardian's own diagnostics when Dir is nil (and
	// anything written to stderr before the guardian starts).
	Log *os.File
	// Setsid detaches the guardian from the caller's session (everything
	// but foreground terminal use).
	Setsid bool
}

// Guardian is the launcher's handle on a started guardian.
type Guardian struct {
	ID         linux.Identity
	proc       *child
	control    *os.File
	events     *os.File
	ForwardOut *os.File
	ForwardErr *os.File
	released   bool
}

// Start starts a guardian and leaves it blocked at the gate. The caller
// commits g.ID to the registry, then calls Release, or Abort on failure.
func Start(s StartSpec) (*Guardian, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	var closeAfter []*os.File
	closeAfter = append(closeAfter, ctlR, evW)
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	// g holds the launcher's ends from here on: every failure below
	// closes them through g.closeAll.
	g := &Guardian{control: ctlW, events: evR}
	// The guardian's own descriptors 0 and 1 are /dev/null, 2 is Log (or
	// /dev/null); the workload's stdin is /dev/null when none is given.
	nullR, nullW, err := devNulls()
	if err != nil {
		g.closeAll()
		return nil, err
	}
	closeAfter = append(closeAfter, nullR, nullW)
	stdin := s.Stdin
	if stdin == nil {
		stdin = nullR
	}
	logf := s.Log
	if logf == nil {
		logf = nullW
	}
	files := []*os.File{nullR, nullW, logf, ctlR, evW, s.Receipt, stdin, s.Stdout, s.Stderr, nil, nil}
	if s.Forward {
		outR, outW, err := os.Pipe()
		if err != nil {
			g.closeAll()
			return nil, err
		}
		g.ForwardOut = outR
		closeAfter = append(closeAfter, outW)
		errR, errW, err := os.Pipe()
		if err != nil {
			g.closeAll()
			return nil, err
		}
		g.ForwardErr = errR
		closeAfter = append(closeAfter, errW)
		growPipe(outR)
		growPipe(errR)
		files[fdFwdOut], files[fdFwdErr] = outW, errW
	}
	if s.Dir != nil {
		files = append(files, s.Dir)
	} else if s.Parent != nil {
		files = append(files, nil, s.Parent)
	}
	sp := spawnSpec{path: s.Exe, args: []string{"hostfork-guardian", GuardianMode}, files: files, setsid: s.Setsid, cgroupFD: -1}
	if s.GuardianCgroup != "" {
		fd, err := unix.Open(s.GuardianCgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			g.closeAll()
			return nil, &os.PathError{Op: "open", Path: s.GuardianCgroup, Err: err}
		}
		defer unix.Close(fd)
		sp.cgroupFD = fd
	}
	c, err := spawn(sp)
	if err != nil {
		g.closeAll()
		return nil, fmt.Errorf("starting guardian: %w", err)
	}
	g.proc = c
	// Our unreaped child: its PID can't be reused, so this identity is
	// the guardian's.
	id, err := linux.IdentityOf(c.pid)
	if err != nil {
		g.Abort()
		return nil, fmt.Errorf("reading guardian identity: %w", err)
	}
	g.ID = id
	return g, nil
}

func (g *Guardian) closeAll() {
	for _, f := range []*os.File{g.control, g.events, g.ForwardOut, g.ForwardErr} {
		if f != nil {
			f.Close()
		}
	}
}

// Release opens the gate: the guardian starts the workload with cfg. The
// message is framed as documented in protocol.go; a config the guardian
// can't accept (a NUL byte in argv or env, an oversized id) is refused here
// and leaves the gate closed.
func (g *Guardian) Release(cfg *Config) error {
	msg, err := encodeRelease(cfg)
	if err != nil {
		return err
	}
	if _, err := g.control.Write(msg); err != nil {
		return fmt.Errorf("releasing guardian: %w", err)
	}
	g.released = true
	return nil
}

// Abort revokes an unreleased gate: the guardian exits without starting
// anything, and is reaped.
func (g *Guardian) Abort() {
	g.control.Close()
	if g.proc != nil {
		_, _ = g.proc.wait()
	}
	g.closeAll()
}

// Signal asks the guardian to send sig to the workload leader.
func (g *Guardian) Signal(sig syscall.Signal) error {
	_, err := g.control.Write(encodeSignal(int(sig)))
	return err
}

// RequestStop asks the guardian to stop its tree (SIGTERM, grace, SIGKILL).
func (g *Guardian) RequestStop(reason api.StopReason) error {
	msg, err := encodeStop(reason)
	if err != nil {
		return err
	}
	_, err = g.control.Write(msg)
	return err
}

// Detach closes the owner channel without any stop: with owner-exit
// "detach" the guardian keeps running.
func (g *Guardian) Detach() {
	g.control.Close()
}

// Events reads guardian events until the guardian closes its end; the
// channel is closed afterwards. Call once.
func (g *Guardian) Events() <-chan Event {
	ch := make(chan Event, 8)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(g.events)
		for sc.Scan() {
			if ev, err := parseEvent(sc.Bytes()); err == nil {
				ch <- ev
			}
		}
	}()
	return ch
}

// Reap waits for the guardian process itself (it is our child) and
// returns its wait status; an error means the status was not observed.
func (g *Guardian) Reap() (syscall.WaitStatus, error) {
	ws, err := g.proc.wait()
	g.events.Close()
	return ws, err
}

// ReadReceipt reads and verifies a receipt file through one open
// descriptor: the file it opened must be the one registered (device and
// inode), and every read is from that descriptor, so a swap of the path
// between the check and the read proves nothing. A symlink is refused.
func ReadReceipt(path string, commandID string, dev, ino uint64) (*Receipt, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Dev != dev || st.Ino != ino {
		return nil, fmt.Errorf("receipt %s was replaced (device/inode %d/%d, registered %d/%d)", path, st.Dev, st.Ino, dev, ino)
	}
	buf := make([]byte, 16<<10)
	var last error
	for try := 0; try < 3; try++ {
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		r, err := ParseReceipt(buf[:n])
		if errors.Is(err, ErrNoReceipt) {
			return nil, err
		}
		if err != nil {
			last = err // the guardian may be mid-write; read again
			continue
		}
		if r.CommandID != commandID || r.ProofDev != dev || r.ProofIno != ino {
			return nil, fmt.Errorf("receipt %s does not belong to command %s", path, commandID)
		}
		return r, nil
	}
	return nil, fmt.Errorf("receipt %s is unreadable: %w", path, last)
}

// ErrNoReceipt: the guardian has not written anything yet.
var ErrNoReceipt = errors.New("no receipt written yet")

// growPipe asks for a 1 MiB pipe buffer (best effort): fewer wakeups per
// byte on the forwarding path. It goes through SyscallConn so the file
// stays non-blocking (Fd would make it blocking).
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
}
