package sigcatch

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func receive(t *testing.T, ch <-chan os.Signal, want syscall.Signal) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("caught %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%v was not caught", want)
	}
}

// TestCatch: caught signals arrive on the channel, in the order sent;
// one catch at a time; synchronous and runtime signals are refused;
// after Stop the Go runtime's handling is back (os/signal catches the
// same signal again), and a second catch works.
func TestCatch(t *testing.T) {
	c, err := Start(8, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
		if err := syscall.Kill(os.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		receive(t, c.C, s)
	}
	if _, err := Start(1, syscall.SIGHUP); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second catch at once: %v, want ErrBusy", err)
	}
	c.Stop()
	c.Stop()
	for _, s := range []syscall.Signal{syscall.SIGSEGV, syscall.SIGURG, syscall.SIGPROF, syscall.SIGCHLD} {
		if c, err := Start(1, s); err == nil {
			c.Stop()
			t.Errorf("Start(%v) was accepted", s)
		}
	}

	// The runtime's handler is back: os/signal gets SIGUSR1 again.
	n := make(chan os.Signal, 1)
	signal.Notify(n, syscall.SIGUSR1)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	receive(t, n, syscall.SIGUSR1)
	signal.Stop(n)
	select {
	case s := <-c.C:
		t.Fatalf("the stopped catch received %v", s)
	default:
	}

	// A second catch, under a storm of signals while goroutines allocate
	// (each handler runs on whatever thread the signal lands on).
	c, err = Start(1024, syscall.SIGUSR2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	stop := make(chan struct{})
	for range 4 {
		go func() {
			var keep [][]byte
			for {
				select {
				case <-stop:
					return
				default:
					keep = append(keep, make([]byte, 4096))
					if len(keep) > 256 {
						keep = nil
					}
				}
			}
		}()
	}
	for range 500 {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	receive(t, c.C, syscall.SIGUSR2)
}

// TestRefused: a signal given twice (its saved action would be the
// catch's own handler) and a signal the calling thread blocks (the
// handler would never run: ErrBlocked, and the caller uses os/signal) are
// refused, and nothing is caught then.
func TestRefused(t *testing.T) {
	if c, err := Start(1, syscall.SIGUSR1, syscall.SIGUSR1); err == nil {
		c.Stop()
		t.Fatal("a signal given twice was accepted")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[(syscall.SIGUSR2-1)/64] |= 1 << ((uint(syscall.SIGUSR2) - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		t.Fatal(err)
	}
	c, err := Start(1, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, ErrBlocked) {
		if c != nil {
			c.Stop()
		}
		t.Fatalf("Start with SIGUSR2 blocked: %v, want ErrBlocked", err)
	}
	// Nothing is in place: a new catch can start.
	c, err = Start(1, syscall.SIGUSR1)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
}
