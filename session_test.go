package hostfork_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/session"
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
	// The reopened handle attaches too: its replay has what came before.
	os2, err := other.AttachWith(ctx, hostfork.AttachOptions{Replay: 1 << 20, NoStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	var out2 bytes.Buffer
	readUntil(t, ctx, os2, &out2, "got:two")
	if !strings.HasPrefix(out2.String(), "30 100") || os2.Offset() != int64(out2.Len()) {
		t.Fatalf("the reopened handle's attach: offset %d, %q", os2.Offset(), out2.String())
	}
	os2.Close()
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
	// With the tree gone, the guardian removes the session's socket (after
	// giving its clients up to 2 s).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(rec.Dir + "/session.sock"); errors.Is(err, os.ErrNotExist) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the session's socket is still there 30 s after the tree's end: %v", err)
		}
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

// A stdin pipe: Send writes (split into frames when bigger than one, in
// order), CloseStdin ends the input, a send after the end is refused; an
// attached client types and reads; CloseStdin on a terminal types ^D.
func TestSessionStdinPipe(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", "tr a-z A-Z; echo done")
	cmd.Stdin = hostfork.StdinPipe
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Bigger than a frame: Send splits it, in order.
	big := strings.Repeat("abcdefgh", 5*session.MaxClientPayload/8+123) + "\n"
	if err := cmd.Send(ctx, []byte(big)); err != nil {
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
	if want := strings.ToUpper(big) + "HELLO\ndone\n"; string(log) != want || *rec.ExitCode != 0 {
		t.Fatalf("log of %d bytes (want %d) exit %v", len(log), len(want), rec.ExitCode)
	}
	if err := cmd.Send(ctx, []byte("late\n")); !errors.Is(err, hostfork.ErrCommandFinished) {
		t.Fatalf("send to a finished pipe command: %v", err)
	}
	// Attached to a pipe session: what is written goes to stdin, the
	// output comes back (the stdout file as it grows), there is no
	// terminal to resize, and CloseStdin ends it.
	cat := env.Command("sh", "-c", "cat; exit 5")
	cat.Stdin = hostfork.StdinPipe
	if err := cat.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := cat.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.TTY() {
		t.Fatal("a pipe session says it is a terminal")
	}
	if _, err := s.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	readUntil(t, ctx, s, &out, "ping\n")
	if err := cat.Resize(ctx, 80, 24); !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "start it with --tty") {
		t.Fatalf("resize of a pipe session: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&out, s); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Exit(ctx); err != nil || rec.ExitCode == nil || *rec.ExitCode != 5 || out.String() != "ping\n" {
		t.Fatalf("the pipe session's end: %v %v, output %q", rec.ExitCode, err, out.String())
	}
	// On a terminal, CloseStdin types its EOF character: cat ends.
	tcat := env.Command("cat")
	tcat.TTY = true
	if err := tcat.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tcat.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := tcat.WaitTree(ctx); err != nil || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.StopReason != "" {
		t.Fatalf("cat on a terminal after ^D: %+v %v", rec, err)
	}
	plain := env.Command("true")
	if err := plain.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Attach(ctx); !errors.Is(err, hostfork.ErrNoSession) {
		t.Fatalf("attach without a session: %v", err)
	}
}

// Eight clients attached at once type interleaved lines: every line
// reaches the workload whole, each client's in its order, and every
// client sees all the output.
func TestSessionManyClients(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", `stty -echo; echo ready; while read l; do [ "$l" = END ] && exit 0; echo "out:$l"; done`)
	cmd.TTY = true
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const clients, lines = 8, 200
	ss := make([]*hostfork.Session, clients)
	for i := range ss {
		s, err := cmd.Attach(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ss[i] = s
	}
	var first bytes.Buffer
	readUntil(t, ctx, ss[0], &first, "ready")
	outs := make([]bytes.Buffer, clients)
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(&outs[i], s)
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < lines; j++ {
				if _, err := fmt.Fprintf(s, "c%d-%d\n", i, j); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// END goes last: after every writer has had its lines taken.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, _ := cmd.Logs(ctx, hostfork.LogOptions{})
		b, _ := io.ReadAll(r)
		r.Close()
		if strings.Count(string(b), "out:") == clients*lines || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Send(ctx, []byte("END\n")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := cmd.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	r, _ := cmd.Logs(ctx, hostfork.LogOptions{})
	log, _ := io.ReadAll(r)
	r.Close()
	check := func(what, text string) {
		next := make([]int, clients)
		for _, l := range strings.Split(strings.ReplaceAll(text, "\r", ""), "\n") {
			l, ok := strings.CutPrefix(l, "out:c")
			if !ok {
				continue
			}
			a, b, _ := strings.Cut(l, "-")
			i, _ := strconv.Atoi(a)
			j, err := strconv.Atoi(b)
			if err != nil || i < 0 || i >= clients || j != next[i] {
				t.Fatalf("%s: line out:c%s out of order or mixed (client %d expected line %d)", what, l, i, next[min(max(i, 0), clients-1)])
			}
			next[i]++
		}
		for i, n := range next {
			if n != lines {
				t.Fatalf("%s: client %d: %d of %d lines", what, i, n, lines)
			}
		}
	}
	check("log", string(log))
	for i := range outs {
		check(fmt.Sprintf("client %d's output", i), first.String()+outs[i].String())
	}
}

// guardianAnon is a process's anonymous resident memory (RssAnon), in
// bytes.
func guardianAnon(t testing.TB, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// A workload writes 1 GiB to its terminal while a client reads slowly (4 KiB every 5 ms):
// the log has every byte, the guardian stays within 1 MiB of anonymous
// memory, and the client is moved ahead with a marker. The throughput
// with and without the client is reported, never asserted.
func TestSessionSlowClient(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 GiB")
	}
	h := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a pty moves 15-500 MiB/s
	defer cancel()
	env := newEnv(t, h, spec.Environment{})
	const size = 1 << 30
	runOnce := func(attach bool) (time.Duration, int64, string) {
		cmd := env.Command("sh", "-c", "stty raw -echo; head -c 1073741824 /dev/zero")
		cmd.TTY = true
		start := time.Now()
		if err := cmd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var maxAnon int64
		var marker bytes.Buffer
		done := make(chan struct{})
		var wg sync.WaitGroup
		if attach {
			s, err := cmd.AttachWith(ctx, hostfork.AttachOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for {
					n, err := s.Read(buf)
					if bytes.Contains(buf[:n], []byte("[hostfork:")) && marker.Len() == 0 {
						marker.Write(buf[:n])
					}
					if err != nil {
						return
					}
					time.Sleep(5 * time.Millisecond) // 0.8 MB/s: far slower than any pty
				}
			}()
		}
		gpid := 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if gpid == 0 {
					if g := cmd.Record().Guardian; g != nil {
						gpid = g.PID
					}
				} else if a := guardianAnon(t, gpid); a > maxAnon {
					maxAnon = a
				}
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		rec, err := cmd.Wait(ctx)
		d := time.Since(start)
		close(done)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cmd.WaitTree(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		st, err := os.Stat(rec.StdoutPath)
		if err != nil || st.Size() != size {
			t.Fatalf("log: %v, %d bytes of %d", err, st.Size(), size)
		}
		return d, maxAnon, marker.String()
	}
	d0, anon0, _ := runOnce(false)
	d1, anon1, marker := runOnce(true)
	t.Logf("1 GiB through the terminal: alone %v (%.0f MiB/s, guardian RssAnon max %d KiB); with a slow client %v (%.0f MiB/s, %+.1f%%, RssAnon max %d KiB)",
		d0, 1024/d0.Seconds(), anon0>>10, d1, 1024/d1.Seconds(), 100*(d1.Seconds()/d0.Seconds()-1), anon1>>10)
	if anon1 > 1<<20 || anon0 > 1<<20 {
		t.Fatalf("guardian anonymous memory %d / %d KiB, over 1 MiB", anon0>>10, anon1>>10)
	}
	if !strings.Contains(marker, "bytes skipped, they are in the log") {
		t.Fatalf("the slow client was not moved ahead with a marker")
	}
}

// The idle timeout: typing every second keeps it from firing, and so do
// resizes and signals; an attached client while the workload waits for
// terminal input suspends it; silent, with only a watcher (--no-stdin)
// attached, the command is stopped as idle.
func TestSessionIdle(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{IdleTimeout: spec.Duration(2 * time.Second), Grace: spec.Duration(200 * time.Millisecond)}})
	cmd := env.Command("sh", "-c", "stty -echo; while read l; do :; done")
	cmd.TTY = true
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	alive := func(what string) {
		t.Helper()
		if rec := cmd.Record(); rec.LeaderState == hostfork.PhaseExited || rec.StopReason != "" {
			t.Fatalf("%s: the idle timeout fired: %+v", what, rec)
		}
	}
	for i := 0; i < 5; i++ { // 5 s of typing, silent output
		if err := cmd.Send(ctx, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	alive("typing every second")
	// Resizes count as activity, and so do forwarded signals (SIGWINCH:
	// the shell ignores it). Each phase outlasts the timeout.
	for i := 0; i < 3; i++ {
		if err := cmd.Resize(ctx, uint16(80+i), 24); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	alive("a resize every second")
	for i := 0; i < 3; i++ {
		if err := cmd.Signal(syscall.SIGWINCH); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	alive("a signal every second")
	s, err := cmd.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	alive("an attached client, the workload reading its terminal")
	s.Close()
	// A watcher (no input) is no one typing: it doesn't suspend the timer.
	w, err := cmd.AttachWith(ctx, hostfork.AttachOptions{NoStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.StopReason != hostfork.ReasonIdle {
		t.Fatalf("silent, with only a watcher attached: stop reason %q", rec.StopReason)
	}
}

// A frame over the limit is refused with an error naming the limit, and
// the guardian goes on serving others.
func TestSessionFrameLimit(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("cat")
	cmd.Stdin = hostfork.StdinPipe
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := session.Dial(ctx, cmd.Record().Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Send(session.Hello, session.HelloPayload(0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(session.Data, make([]byte, session.MaxClientPayload+1)); !errors.Is(err, session.ErrFrameTooLarge) {
		t.Fatalf("the codec sent a frame over the limit: %v", err)
	}
	raw := session.AppendFrame(nil, session.Data, make([]byte, 1<<20))
	if err := conn.SendRaw(raw[:5+64]); err != nil {
		t.Fatal(err)
	}
	var got string
	for {
		f, err := conn.Next()
		if err != nil {
			break
		}
		if f.Type == session.Error {
			got = string(f.Payload)
		}
	}
	if !strings.Contains(got, "over the limit of 16384") {
		t.Fatalf("guardian's answer: %q", got)
	}
	if err := cmd.Send(ctx, []byte("still served\n")); err != nil {
		t.Fatal(err)
	}
}
