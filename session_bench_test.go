package hostfork_test

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// startTTY starts argv with a terminal in a new environment of b's.
func startTTY(b *testing.B, argv ...string) (*hostfork.Host, *hostfork.Command) {
	h := newHost(b)
	p, err := h.Plan(context.Background(), spec.Environment{})
	if err != nil {
		b.Fatal(err)
	}
	env, err := h.Create(context.Background(), p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}) })
	cmd := env.Command(argv...)
	cmd.TTY = true
	if err := cmd.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return h, cmd
}

// Attach to the first byte of the replay (docs/benchmarks.md: ≤ 5 ms).
func BenchmarkSessionAttachFirstByte(b *testing.B) {
	_, cmd := startTTY(b, "sh", "-c", "echo ready; exec sleep 600")
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := os.Stat(cmd.Record().StdoutPath); (err == nil && st.Size() > 0) || time.Now().After(deadline) {
			break
		}
	}
	buf := make([]byte, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := cmd.Attach(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Read(buf); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// A keystroke echoed back over the unix socket (≤ 2 ms).
func BenchmarkSessionKeystrokeEcho(b *testing.B) {
	_, cmd := startTTY(b, "cat")
	s, err := cmd.AttachWith(context.Background(), hostfork.AttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Write([]byte{'a'}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// A session with one attached client writing to its log (≥ 200 MiB/s
// asked; the pty's own rate bounds it, see docs/benchmarks.md).
func BenchmarkSessionLogThroughput(b *testing.B) {
	const size = 64 << 20
	h := newHost(b)
	p, _ := h.Plan(context.Background(), spec.Environment{})
	env, err := h.Create(context.Background(), p)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop(context.Background(), hostfork.StopOptions{Grace: -1})
	ctx := context.Background()
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		cmd := env.Command("sh", "-c", "stty raw -echo; head -c "+strconv.Itoa(size)+" /dev/zero")
		cmd.TTY = true
		if err := cmd.Start(ctx); err != nil {
			b.Fatal(err)
		}
		s, err := cmd.AttachWith(ctx, hostfork.AttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, s) }()
		if _, err := cmd.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		s.Close()
		if _, err := cmd.WaitTree(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// rss is a process's resident memory (VmRSS) in KiB.
func rss(pid int) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return -1
}

// An idle session's memory against a command without a terminal: the
// guardians' resident memory (≤ 200 KiB more asked).
func BenchmarkSessionIdleMemory(b *testing.B) {
	_, tty := startTTY(b, "sleep", "600")
	h := newHost(b)
	p, _ := h.Plan(context.Background(), spec.Environment{})
	env, err := h.Create(context.Background(), p)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop(context.Background(), hostfork.StopOptions{Grace: -1})
	plain := env.Command("sleep", "600")
	if err := plain.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	var extra int64
	for i := 0; i < b.N; i++ {
		time.Sleep(10 * time.Millisecond)
		extra = rss(tty.Record().Guardian.PID) - rss(plain.Record().Guardian.PID)
	}
	b.ReportMetric(float64(extra), "KiB-more-rss")
}
