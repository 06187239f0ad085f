// Package session is the Go side of a command's session channel: the
// framed protocol its guardian serves on session.sock in the command's
// directory (internal/supervise/hf_session.c; docs/sessions.md), and the
// dialer that checks the server's peer credentials.
//
// A frame is a type byte, a big-endian uint32 payload length and the
// payload. Client frames carry at most MaxClientPayload bytes; guardian
// frames at most MaxServerPayload.
package session

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// SocketName is the session socket's name in the command's directory.
const SocketName = "session.sock"

// Limits (hf.h, HF_SESS_IN_MAX; hf_session.c, CHUNK).
const (
	MaxClientPayload = 16 << 10
	MaxServerPayload = 64 << 10
)

// Frame types. Client → guardian: Hello (first, once), Data, Resize,
// EOF, Sync. Guardian → client: Welcome, Output, Skip, SyncReply (the
// same byte as Sync), Exit (last), Error (then the guardian closes).
const (
	Hello   byte = 'h'
	Data    byte = 'd'
	Resize  byte = 'r'
	EOF     byte = 'e'
	Sync    byte = 's'
	Welcome byte = 'H'
	Output  byte = 'o'
	Skip    byte = 'k'
	Exit    byte = 'x'
	Error   byte = 'E'
)

// Hello flags.
const (
	NoInput  = 1 // a watcher: Data frames are refused
	NoOutput = 2 // send and resize only: no output is sent
)

// Kinds in the Welcome frame.
const (
	KindTTY   = 1
	KindStdin = 2
)

// ErrFrameTooLarge: a frame's payload is over the limit.
var ErrFrameTooLarge = errors.New("session frame over the size limit")

// Frame is one frame.
type Frame struct {
	Type    byte
	Payload []byte
}

// AppendFrame appends the encoding of a frame to b.
func AppendFrame(b []byte, typ byte, payload []byte) []byte {
	b = append(b, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(payload)))
	return append(b, payload...)
}

// ReadFrame reads one frame whose payload is at most limit bytes into
// buf's storage (grown as needed).
func ReadFrame(r io.Reader, limit int, buf []byte) (Frame, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if uint64(n) > uint64(limit) {
		return Frame{}, fmt.Errorf("frame type %q of %d bytes, limit %d: %w", h[0], n, limit, ErrFrameTooLarge)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{h[0], buf}, nil
}

// HelloPayload encodes a hello: how many bytes of output to replay and
// the flags.
func HelloPayload(replay int64, flags byte) []byte {
	p := make([]byte, 9)
	replay = max(replay, 0)
	binary.BigEndian.PutUint64(p, uint64(replay))
	p[8] = flags
	return p
}

// ResizePayload encodes a resize.
func ResizePayload(cols, rows uint16) []byte {
	return []byte{byte(cols >> 8), byte(cols), byte(rows >> 8), byte(rows)}
}

// Welcomed is a decoded Welcome: the session's kind, the log offset of the
// first output byte sent, and the log's end at attach.
type Welcomed struct {
	Kind   int
	Offset int64
	End    int64
}

// ParseWelcome decodes a Welcome payload.
func ParseWelcome(p []byte) (Welcomed, error) {
	if len(p) != 17 {
		return Welcomed{}, fmt.Errorf("session: welcome of %d bytes, want 17", len(p))
	}
	return Welcomed{int(p[0]), int64(binary.BigEndian.Uint64(p[1:])), int64(binary.BigEndian.Uint64(p[9:]))}, nil
}

// ParseSkip decodes a Skip payload: the log offset the output resumes at.
func ParseSkip(p []byte) (int64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("session: skip of %d bytes, want 8", len(p))
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

// Conn is a connection to a session's guardian.
type Conn struct {
	c   *net.UnixConn
	R   *bufio.Reader
	buf []byte
}

// ErrNoSocket: the command's directory has no session socket (none was
// made, or its guardian has ended).
var ErrNoSocket = errors.New("no session socket")

// Dial connects to the session socket in dir and checks that the
// listening process is this user's or root's (SO_PEERCRED) before
// anything is sent. The path is reached through a descriptor of dir, so
// its length does not matter.
func Dial(ctx context.Context, dir string) (*Conn, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, SocketName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SocketName), ErrNoSocket)
	}
	path := "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + SocketName
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SocketName), ErrNoSocket)
		}
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc); err != nil {
		uc.Close()
		return nil, err
	}
	return &Conn{c: uc, R: bufio.NewReaderSize(uc, MaxServerPayload+5)}, nil
}

func checkPeer(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("session socket served by uid %d, not this user or root: refused", cred.Uid)
	}
	return nil
}

// Send writes one client frame.
func (c *Conn) Send(typ byte, payload []byte) error {
	if len(payload) > MaxClientPayload {
		return fmt.Errorf("frame of %d bytes, limit %d: %w", len(payload), MaxClientPayload, ErrFrameTooLarge)
	}
	_, err := c.c.Write(AppendFrame(make([]byte, 0, 5+len(payload)), typ, payload))
	return err
}

// Next reads the next guardian frame; its payload is valid until the next
// call.
func (c *Conn) Next() (Frame, error) {
	f, err := ReadFrame(c.R, MaxServerPayload, c.buf)
	if err == nil {
		c.buf = f.Payload[:0]
	}
	return f, err
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// CloseRead unblocks a pending Next (it then fails).
func (c *Conn) CloseRead() error { return c.c.CloseRead() }

// SetDeadline sets the connection's deadline (a past time unblocks every
// pending call).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// SendRaw writes bytes as they are: frames built with AppendFrame (sent
// in one write), or a test's bad framing.
func (c *Conn) SendRaw(b []byte) error {
	_, err := c.c.Write(b)
	return err
}
