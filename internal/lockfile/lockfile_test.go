package lockfile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

const holdEnv = "HOSTFORK_LOCKFILE_TEST_HOLD"

// TestMain lets the test binary hold a lock as another process.
func TestMain(m *testing.M) {
	if p := os.Getenv(holdEnv); p != "" {
		l, err := Acquire(context.Background(), p)
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		buf := make([]byte, 1)
		os.Stdin.Read(buf) // until the test closes our stdin
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Another process holds the lock: an ended context says ErrBusy; a
// waiting Acquire gets it once that process lets go; a symbolic link at
// the path is never followed.
func TestAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+p)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	buf := make([]byte, 5)
	if n, err := out.Read(buf); err != nil || string(buf[:n]) != "held\n" {
		t.Fatalf("holder: %q %v", buf[:n], err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, p); !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until a deadline: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := Acquire(context.Background(), p)
		l.Release()
		got <- err
	}()
	in.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire did not get the lock its holder released")
	}
	link := filepath.Join(dir, "link.lock")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(context.Background(), link); err == nil {
		t.Fatal("a symbolic link was followed")
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Fatal("the link's target was created")
	}
}
