package hostfork_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// readUntil reads s until its output contains want (bounded by ctx).
func readUntil(t *testing.T, ctx context.Context, s *hostfork.Session, out *bytes.Buffer, want string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for !strings.Contains(out.String(), want) {
			n, err := s.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("reading for %q: %v; got %q", want, err, out.String())
		}
	case <-ctx.Done():
		s.Close()
		<-done
		t.Fatalf("no %q in the output: %q", want, out.String())
	}
}

// A TTY command: a shell reads typed lines from its terminal, the output
// reaches the client and the log, a second process (OpenCommand) sends
// input and resizes, and the exit status comes back.
func TestSessionTTY(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", `stty size; while read l; do [ "$l" = quit ] && exit 7; echo "got:$l"; stty size; done`)
	cmd.TTY = true
	cmd.Size = hostfork.TermSize{Cols: 100, Rows: 30}
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := cmd.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.TTY() {
		t.Fatal("not a tty session")
	}
	var out bytes.Buffer
	readUntil(t, ctx, s, &out, "30 100")
	if _, err := s.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, s, &out, "got:hello")
	other, err := h.OpenCommand(ctx, cmd.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Resize(ctx, 50, 20); err != nil {
		t.Fatal(err)
	}
	if err := other.Send(ctx, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, ctx, s, &out, "20 50")
	if err := other.Send(ctx, []byte("quit\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&out, s); err != nil {
		t.Fatal(err)
	}
	if !s.Ended() {
		t.Fatal("EOF without the exit frame")
	}
	rec, err := s.Exit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ExitCode == nil || *rec.ExitCode != 7 {
		t.Fatalf("exit %v", rec.ExitCode)
	}
	rec, err = cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Session != "tty" || rec.LastInputAt == nil || rec.LastOutputAt == nil {
		t.Fatalf("record: session %q last input %v output %v", rec.Session, rec.LastInputAt, rec.LastOutputAt)
	}
	r, err := cmd.Logs(ctx, hostfork.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log, _ := io.ReadAll(r)
	r.Close()
	for _, w := range []string{"30 100", "got:hello", "got:two", "20 50"} {
		if !strings.Contains(string(log), w) {
			t.Fatalf("log lacks %q: %q", w, log)
		}
	}
	if err := cmd.Send(ctx, []byte("x")); !errors.Is(err, hostfork.ErrCommandFinished) {
		t.Fatalf("send to a finished command: %v", err)
	}
}

// A stdin pipe: Send writes, CloseStdin ends the input.
func TestSessionStdinPipe(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", "tr a-z A-Z; echo done")
	cmd.Stdin = hostfork.StdinPipe
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Send(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := cmd.Logs(ctx, hostfork.LogOptions{})
	log, _ := io.ReadAll(r)
	r.Close()
	if string(log) != "HELLO\ndone\n" || *rec.ExitCode != 0 {
		t.Fatalf("log %q exit %v", log, rec.ExitCode)
	}
	plain := env.Command("true")
	if err := plain.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Attach(ctx); !errors.Is(err, hostfork.ErrNoSession) {
		t.Fatalf("attach without a session: %v", err)
	}
	_ = time.Second
}
