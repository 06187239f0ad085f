// Package sigcatch catches asynchronous signals with a C handler of its
// own, for the hostfork CLI's foreground run and exec, which forward
// them to the command (docs/decisions.md, entry 76).
//
// os/signal turns each signal's delivery on and off through a round trip
// to the runtime's signal-mask thread; with the CLI's one P that is two
// thread hand-offs a signal, and the seven signals a foreground command
// forwards took 0.3 ms of every run's critical path (0.3–0.6 ms in
// entry 55). Here each signal is one sigaction: the handler writes the
// signal's number to a pipe, and a goroutine turns the bytes into values
// on a channel. The Go runtime allows it: a program's C code may install
// handlers for asynchronous signals, with SA_ONSTACK ("Go programs that
// use cgo or SWIG", os/signal).
//
// Stop puts the runtime's handlers back. The pipe stays open for the
// process's life: a handler that ran just before the Stop still finds its
// descriptor, never another file that took its number.
//
// A signal blocked in the calling thread's mask is refused (ErrBlocked):
// the Go runtime's threads keep the mask the process started with for
// most asynchronous signals, and only os/signal's own signal-mask thread
// unblocks them; a handler of ours would never run. The caller then uses
// os/signal.
//
// While a catch is in place, os/signal can't catch the same signals (the
// runtime believes its handler is installed and does not install it
// again): one catch at a time, and no os/signal for those signals meanwhile.
package sigcatch

/*
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define HF_NSIG 65

static volatile int hf_catch_fd = -1;
static struct sigaction hf_catch_old[HF_NSIG];

static void hf_catch_handler(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	int fd = hf_catch_fd;
	if (fd >= 0)
		(void)!write(fd, &b, 1); // a full pipe drops it, as os/signal does
	errno = e;
}

// hf_blocked reports the first of sigs that the calling thread blocks, 0
// if none.
static int hf_blocked(const int *sigs, int n)
{
	sigset_t cur;
	sigemptyset(&cur);
	if (pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (sigismember(&cur, sigs[i]) == 1)
			return sigs[i];
	return 0;
}

// hf_catch installs the handler for sigs, writing to fd; 0, or the errno
// of the sigaction that failed (none is installed then).
static int hf_catch(int fd, const int *sigs, int n)
{
	hf_catch_fd = fd;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = hf_catch_handler;
	sa.sa_flags = SA_ONSTACK | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (int i = 0; i < n; i++) {
		if (sigs[i] <= 0 || sigs[i] >= HF_NSIG || sigaction(sigs[i], &sa, &hf_catch_old[sigs[i]]) != 0) {
			int e = sigs[i] <= 0 || sigs[i] >= HF_NSIG ? EINVAL : errno;
			for (int j = 0; j < i; j++)
				sigaction(sigs[j], &hf_catch_old[sigs[j]], NULL);
			return e;
		}
	}
	return 0;
}

// hf_release puts back the handlers hf_catch replaced.
static void hf_release(const int *sigs, int n)
{
	for (int i = 0; i < n; i++)
		sigaction(sigs[i], &hf_catch_old[sigs[i]], NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	mu      sync.Mutex
	pipeErr error
	once    sync.Once
	current chan os.Signal // the catch's channel, nil between catches
	wfd     int            // the pipe's write end, which the handler writes to
)

// Catch is one catch in place.
type Catch struct {
	// C receives the caught signals. A signal that finds it full is
	// dropped, as os/signal drops it.
	C    <-chan os.Signal
	ch   chan os.Signal
	sigs []C.int
}

// ErrBusy is Start's error while another catch is in place.
var ErrBusy = errors.New("sigcatch: another catch is in place")

// ErrBlocked is Start's error for a signal the calling thread blocks.
var ErrBlocked = errors.New("sigcatch: the signal is blocked in this thread's mask")

// start makes the pipe and its reader, once per process.
func start() {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		pipeErr = fmt.Errorf("sigcatch: %w", err)
		return
	}
	wfd = p[1]
	r := os.NewFile(uintptr(p[0]), "sigcatch")
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := r.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			ch := current
			mu.Unlock()
			for _, b := range buf[:n] {
				if ch == nil {
					continue
				}
				select {
				case ch <- syscall.Signal(b):
				default:
				}
			}
		}
	}()
}

// Start catches sigs (asynchronous signals only: not SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGTRAP, SIGPROF or the runtime's own), each once,
// until Stop; buffer is the channel's capacity.
func Start(buffer int, sigs ...syscall.Signal) (*Catch, error) {
	once.Do(start)
	if pipeErr != nil {
		return nil, pipeErr
	}
	cs := make([]C.int, len(sigs))
	for i, s := range sigs {
		switch s {
		case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGPROF,
			syscall.SIGURG, syscall.SIGCHLD, syscall.SIGPIPE, syscall.SIGABRT, syscall.SIGSYS:
			return nil, fmt.Errorf("sigcatch: %v is the Go runtime's to handle: %w", s, syscall.EINVAL)
		}
		for _, t := range sigs[:i] {
			if t == s {
				// Its saved action would be our own handler.
				return nil, fmt.Errorf("sigcatch: %v given twice: %w", s, syscall.EINVAL)
			}
		}
		cs[i] = C.int(s)
	}
	mu.Lock()
	defer mu.Unlock()
	if current != nil {
		return nil, ErrBusy
	}
	var first *C.int
	if len(cs) > 0 {
		first = &cs[0]
	}
	// Every thread of the runtime has the start's mask for these
	// signals: the calling thread's tells.
	blocked := C.hf_blocked(first, C.int(len(cs)))
	switch {
	case blocked < 0:
		return nil, fmt.Errorf("sigcatch: reading the signal mask: %w", syscall.EINVAL)
	case blocked > 0:
		return nil, fmt.Errorf("sigcatch: %v: %w", syscall.Signal(blocked), ErrBlocked)
	}
	ch := make(chan os.Signal, buffer)
	current = ch
	if e := C.hf_catch(C.int(wfd), first, C.int(len(cs))); e != 0 {
		current = nil
		return nil, fmt.Errorf("sigcatch: installing a handler: %w", syscall.Errno(e))
	}
	return &Catch{C: ch, ch: ch, sigs: cs}, nil
}

// Stop puts back the handlers the catch replaced (the Go runtime's). A
// signal whose byte the reader took before the Stop may still reach the
// channel; nothing caught after it does. Calling it again does nothing.
func (c *Catch) Stop() {
	mu.Lock()
	defer mu.Unlock()
	if current != c.ch || c.sigs == nil {
		return
	}
	var first *C.int
	if len(c.sigs) > 0 {
		first = &c.sigs[0]
	}
	C.hf_release(first, C.int(len(c.sigs)))
	c.sigs = nil
	current = nil
}
