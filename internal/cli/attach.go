package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

const defaultDetachKeys = "ctrl-p,ctrl-q"

func newAttachCmd(g *globals) *cobra.Command {
	var replay, keys string
	var noStdin bool
	c := &cobra.Command{
		Use:   "attach [--replay SIZE] [--detach-keys KEYS] [--no-stdin] ID",
		Short: "Attach this terminal to a command's session (started with --tty or --stdin pipe)",
		Long: `attach replays the last SIZE bytes of the command's output (default 64KiB,
enough to redraw a screen), then streams it live, sends what is typed here to
the command's terminal (this terminal in raw mode, its size followed), and
exits with the command's status when it ends, with the same codes as run.
The detach keys (default ctrl-p,ctrl-q) leave the command running. Several
clients may attach at once. ID is a command's id, or the id that
'run --detach' printed.`,
		Args: exactArgs(1, "one command id"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			n, err := spec.ParseSize(replay)
			if err != nil || n < 0 {
				return usageErr("--replay %q: give a size such as 64KiB, 1MiB or 0", replay)
			}
			seq, err := parseDetachKeys(keys)
			if err != nil {
				return err
			}
			ctx := c.Context()
			cmd, err := openSessionCommand(ctx, h, args[0])
			if err != nil {
				return err
			}
			s, err := cmd.Attach(ctx, hostfork.AttachOptions{Replay: n, NoStdin: noStdin})
			if err != nil {
				return err
			}
			detached, err := interact(g, s, seq, !noStdin)
			if err != nil || detached {
				return err
			}
			rec, err := s.Exit(ctx)
			if err != nil {
				return err
			}
			return commandExit(g, rec)
		}),
	}
	c.Flags().StringVar(&replay, "replay", "64KiB", "replay this much of the latest output first (0: none)")
	c.Flags().StringVar(&keys, "detach-keys", defaultDetachKeys, "the keys that detach, leaving the command running")
	c.Flags().BoolVar(&noStdin, "no-stdin", false, "watch only: send nothing typed here")
	return c
}

// openSessionCommand is the session of the command ID names (as logs and
// stop accept it), in this process's library or through a server.
func openSessionCommand(ctx context.Context, h backend, arg string) (sessionCmd, error) {
	id, err := commandID(ctx, h, arg)
	if err != nil {
		return nil, err
	}
	return h.SessionOf(ctx, id)
}

// parseDetachKeys parses a comma-separated key sequence: ctrl-a ...
// ctrl-z, ctrl-@, ctrl-[, ctrl-\, ctrl-], ctrl-^, ctrl-_, or single
// characters ("" disables detaching).
func parseDetachKeys(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	var seq []byte
	for _, k := range strings.Split(s, ",") {
		switch {
		case len(k) == 1 && k[0] > ' ' && k[0] < 0x7f:
			seq = append(seq, k[0])
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			c := k[5]
			switch {
			case c >= 'a' && c <= 'z':
				seq = append(seq, c-'a'+1)
			case c >= 'A' && c <= 'Z':
				seq = append(seq, c-'A'+1)
			case strings.IndexByte("@[\\]^_", c) >= 0:
				seq = append(seq, c-'@')
			default:
				return nil, badKeys(s, k)
			}
		default:
			return nil, badKeys(s, k)
		}
	}
	return seq, nil
}

func badKeys(s, k string) error {
	return usageErr("--detach-keys %q: %q is not a key; give a comma-separated list such as ctrl-p,ctrl-q (ctrl-a..ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_, or single characters)", s, k)
}

// interact connects this terminal to s: raw mode and its size followed
// when stdin is a terminal, output copied out, input (with input) copied
// in until the detach keys. It returns when the session's output ends
// (detached false) or on the detach keys (true).
func interact(g *globals, s attached, detach []byte, input bool) (bool, error) {
	fd := int(os.Stdin.Fd())
	if term.IsTerminal(fd) && input {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return false, err
		}
		defer term.Restore(fd, old)
	}
	if term.IsTerminal(fd) && s.TTY() {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		resize := func() {
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				_ = s.Resize(uint16(w), uint16(h))
			}
		}
		resize()
		go func() {
			for range winch {
				resize()
			}
		}()
	}
	out := make(chan error, 1)
	go func() {
		_, err := io.Copy(g.out, s)
		out <- err
	}()
	detached := make(chan struct{})
	if input {
		go copyInput(s, detach, detached)
	}
	select {
	case err := <-out:
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		return false, nil
	case <-detached:
		s.Close()
		fmt.Fprintf(g.err, "\r\nhostfork: detached; the command runs on\r\n")
		return true, nil
	}
}

// copyInput copies stdin to s, watching for the detach sequence: its
// keys are held back while they match, and sent if the sequence breaks.
func copyInput(s attached, detach []byte, detached chan<- struct{}) {
	buf := make([]byte, 4096)
	f := detachFilter{keys: detach}
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			out, hit := f.feed(buf[:n])
			if hit {
				_, _ = s.Write(out)
				close(detached)
				return
			}
			if len(out) > 0 {
				if _, werr := s.Write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// detachFilter finds the detach keys in typed input. The keys typed so
// far that could begin the sequence are held back; once they can't, the
// first of them goes out and the rest are looked at again, so a key
// typed twice (ctrl-p ctrl-p ctrl-q) still detaches on the sequence's
// end.
type detachFilter struct {
	keys, held []byte
}

// feed returns the input to send, and true when the sequence is
// complete (the input up to its start is returned; the rest is dropped).
func (f *detachFilter) feed(in []byte) ([]byte, bool) {
	if len(f.keys) == 0 {
		return in, false
	}
	out := make([]byte, 0, len(in)+len(f.held))
	for _, b := range in {
		f.held = append(f.held, b)
		for len(f.held) > 0 && !bytes.HasPrefix(f.keys, f.held) {
			out = append(out, f.held[0])
			f.held = f.held[1:]
		}
		if len(f.held) == len(f.keys) {
			f.held = f.held[:0]
			return out, true
		}
	}
	return out, false
}
