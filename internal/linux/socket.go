package linux

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerCred reads the credentials of the process on the other end of a
// unix socket connection (SO_PEERCRED), as the kernel recorded them when
// it connected.
func PeerCred(c syscall.Conn) (uid, pid int, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid, pid, ok = int(cred.Uid), int(cred.Pid), true
		}
	})
	return uid, pid, ok
}

// ListeningUnixStream marks the inherited descriptor fd close-on-exec and
// reports whether it is a listening unix stream socket.
func ListeningUnixStream(fd int) (bool, error) {
	unix.CloseOnExec(fd)
	domain, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	acc, err3 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, err
	}
	return domain == unix.AF_UNIX && typ == unix.SOCK_STREAM && acc == 1, nil
}

// SignalNum is the signal named name ("SIGTERM"), 0 if none is.
func SignalNum(name string) syscall.Signal { return unix.SignalNum(name) }
