package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// readOnlyOf sums the sizes and the resident sizes, in KiB, of the
// read-only mappings of file exe larger than 1 MiB (its code and its
// read-only data) in process pid, from /proc/PID/smaps.
func readOnlyOf(pid int, exe string) (size, rss int, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var msize, mrss int
	in := false
	flush := func() {
		if in && msize > 1024 {
			size, rss = size+msize, rss+mrss
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case smapsHeader(fields):
			flush()
			in = len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w")
			msize, mrss = 0, 0
		case in && len(fields) >= 2 && fields[0] == "Size:":
			msize, _ = strconv.Atoi(fields[1])
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			mrss, _ = strconv.Atoi(fields[1])
		}
	}
	flush()
	return size, rss, sc.Err()
}

// smapsHeader reports whether the fields of a /proc/PID/smaps line are a
// mapping's header ("start-end perms offset dev inode [path]"), not one
// of its "Key: value" lines.
func smapsHeader(fields []string) bool {
	return len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":")
}

// printMaps is the command hostfork-maps of this test binary: it prints
// the size and the resident size, in KiB, of the binary's own code and
// read-only data as the process finds them after its constructors and
// package initialisers, then what the constructor found (the smallest
// share of a segment in the page cache, in percent, -1 if it did not
// look; what a page fault cost, in ns, 0 if untimed) and whether it
// populated every segment (1 or 0), and exits.
func printMaps() {
	exe, err := os.Executable()
	if err == nil {
		var size, rss int
		if size, rss, err = readOnlyOf(os.Getpid(), exe); err == nil {
			share, fault, all := prefaulted()
			populated := 0
			if all {
				populated = 1
			}
			fmt.Println(size, rss, share, fault.Nanoseconds(), populated)
			os.Exit(0)
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// startMaps is what a run of the CLI as hostfork-maps found at the start
// of main.
type startMaps struct {
	mapped    int           // share of the code and read-only data mapped, in percent
	cached    int           // smallest share of a segment in the page cache when the constructor looked (-1: it did not)
	fault     time.Duration // what a page fault cost the constructor (0: untimed)
	populated bool          // the constructor populated every segment
}

func (m startMaps) String() string {
	return fmt.Sprintf("%d %% mapped at main; constructor: %d %% in the page cache, a fault %v, populated %v", m.mapped, m.cached, m.fault, m.populated)
}

// pageCacheShare is the share, in percent, of file path's pages that are
// in the page cache.
func pageCacheShare(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pg := os.Getpagesize()
	vec := make([]byte, (len(m)+pg-1)/pg)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore %s: %v", path, e)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return in * 100 / len(vec)
}

// dearFault is the constructor's HF_DEAR_FAULT_NS.
const dearFault = 4 * time.Microsecond

// TestPrefault: the CLI maps its code and read-only data before its
// package initialisers run (decision 66) where a page fault is dear
// (decision 69) or HOSTFORK_PREFAULT=1 says so, never with
// HOSTFORK_PREFAULT=0, never when its binary is not in the page cache,
// and the guardian (a helper mode of the same binary) does not map them.
func TestPrefault(t *testing.T) {
	c := newCLI(t)
	atStartArgs := func(exe string, args []string, env ...string) startMaps {
		t.Helper()
		cmd := &exec.Cmd{Path: exe, Args: append([]string{"hostfork-maps"}, args...), Env: append(os.Environ(), env...)}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s as hostfork-maps %q: %v", exe, env, err)
		}
		var size, rss, cached, populated int
		var fault int64
		if _, err := fmt.Sscan(string(out), &size, &rss, &cached, &fault, &populated); err != nil || size == 0 {
			t.Fatalf("%s as hostfork-maps %q printed %q (%v)", exe, env, out, err)
		}
		return startMaps{mapped: rss * 100 / size, cached: cached, fault: time.Duration(fault), populated: populated == 1}
	}
	atStart := func(exe string, env ...string) startMaps {
		t.Helper()
		return atStartArgs(exe, nil, env...)
	}

	// A binary in the page cache (it ran a moment ago).
	if got := atStart(c.exe, "HOSTFORK_PREFAULT=1"); got.mapped < 99 || !got.populated || got.fault != 0 {
		t.Errorf("HOSTFORK_PREFAULT=1: %v; want all mapped and no fault timed", got)
	}
	if got := atStart(c.exe, "HOSTFORK_PREFAULT=0"); got.populated || got.cached != -1 || got.fault != 0 || got.mapped >= 99 {
		t.Errorf("HOSTFORK_PREFAULT=0: %v; want nothing looked at, timed or populated", got)
	}
	got := atStart(c.exe, "HOSTFORK_PREFAULT=")
	t.Logf("by default: %v", got)
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC, &res); err != nil {
		t.Fatal(err)
	}
	switch {
	case got.fault <= 0 && res.Nano() <= 1000:
		t.Errorf("by default: %v; want a page fault timed (CLOCK_MONOTONIC ticks every %d ns)", got, res.Nano())
	case got.fault <= 0 && (got.populated || got.cached != -1):
		t.Errorf("by default, with no fault timed on a clock of %d ns: %v; want demand paging", res.Nano(), got)
	case got.fault >= dearFault && (!got.populated || got.mapped < 99):
		t.Errorf("by default, where a fault costs %v: %v; want all mapped", got.fault, got)
	case got.fault < dearFault && (got.populated || got.cached != -1 || got.mapped >= 99):
		t.Errorf("by default, where a fault costs %v: %v; want demand paging", got.fault, got)
	}

	// A helper mode (argv[1] "__…"; the guardian and the keeper run in
	// an empty environment, so this one is told to populate): the
	// constructor leaves it alone.
	if got := atStartArgs(c.exe, []string{"__hostfork_none"}, "HOSTFORK_PREFAULT=1"); got.populated || got.cached != -1 || got.fault != 0 {
		t.Errorf("a helper mode with HOSTFORK_PREFAULT=1: %v; want nothing looked at, timed or populated", got)
	}

	// A copy out of the page cache: demand paging, not a read of the
	// whole binary, even where faults are dear. The copy lives on a
	// filesystem of the test's own whose device reads no more ahead than
	// the page a fault asks for: with the host disk's readahead (8 MiB on
	// this kind of VM) the first faults of a cold start read most of the
	// binary anyway, and whether that crosses the constructor's 90 %
	// depends on the binary's layout.
	mnt, dev := testutil.LoopExt4(t)
	ra := "/sys/block/" + filepath.Base(dev) + "/queue/read_ahead_kb"
	oldRA, err := os.ReadFile(ra)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ra, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(ra, oldRA, 0); err != nil {
			t.Errorf("restoring %s: %v", ra, err)
		}
	})
	cold := filepath.Join(mnt, "hostfork")
	b, err := os.ReadFile(c.exe)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cold, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if share := pageCacheShare(t, cold); share > 5 {
		t.Fatalf("the copy %s still has %d %% of its pages in the page cache after fsync and FADV_DONTNEED", cold, share)
	}
	got = atStart(cold, "HOSTFORK_PREFAULT=1")
	t.Logf("cold start: %v", got)
	if got.populated || got.cached >= 90 || got.mapped >= 90 {
		t.Errorf("a CLI whose binary was not in the page cache: %v; want only what it ran mapped", got)
	}
	if share := pageCacheShare(t, cold); share >= 90 {
		t.Errorf("a cold start read %d %% of the binary into the page cache; want only what it ran", share)
	}

	// The guardian, once its workload runs (its constructors are done),
	// started from this binary even where a helper program is named
	// (decision 80): it is this binary's guardian mode that is checked.
	cmd := c.command("run", "--", "sleep", "3")
	cmd.Env = append(cmd.Env, supervise.HelperEnv+"="+c.exe)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	end := time.Now().Add(20 * time.Second)
	for {
		for _, g := range childrenOf(cmd.Process.Pid) {
			if len(childrenOf(g)) == 0 {
				continue
			}
			size, rss, err := readOnlyOf(g, c.exe)
			if err != nil || size == 0 {
				t.Fatalf("the guardian's mappings of %s: %d KiB, %v", c.exe, size, err)
			}
			if rss*100 >= size*90 {
				t.Errorf("the guardian has %d of %d KiB of its code and read-only data mapped; want only what it ran", rss, size)
			}
			return
		}
		if time.Now().After(end) {
			t.Fatalf("no guardian with a workload under hostfork (pid %d)", cmd.Process.Pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
