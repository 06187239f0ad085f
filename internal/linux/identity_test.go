package linux

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStatOddName(t *testing.T) {
	line := []byte("1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0")
	st, err := parseStat(1234, line)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != 'S' || st.PPID != 1 || st.StartTime != 98765 || st.Threads != 1 {
		t.Fatalf("parsed %+v", st)
	}
	if _, err := parseStat(1, []byte("1 (x")); err == nil {
		t.Fatal("malformed stat accepted")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 5 1000 10 1 1 1"))
	f.Add([]byte("9 ()) R 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(1, b) // must not panic
		if err != nil {
			return
		}
		// What it accepts, a plain split at the same white space reads
		// the same.
		i := bytes.LastIndexByte(b, ')')
		fs := strings.FieldsFunc(string(b[i+2:]), func(r rune) bool { return r < 128 && isSpace(byte(r)) })
		if len(fs) < 20 {
			t.Fatalf("accepted %q with %d fields", b, len(fs))
		}
		ppid, _ := strconv.Atoi(fs[1])
		threads, _ := strconv.Atoi(fs[17])
		start, _ := strconv.ParseUint(fs[19], 10, 64)
		if st.State != fs[0][0] || st.PPID != ppid || st.Threads != threads || st.StartTime != start {
			t.Fatalf("%q: parsed %+v, fields say %q", b, st, fs[:20])
		}
	})
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.State != 'R' && st.State != 'S' || st.Threads < 1 || st.StartTime == 0 {
		t.Fatalf("read %+v", st)
	}
	if _, err := ReadStat(1 << 30); err != ErrNoProcess {
		t.Fatalf("a missing pid gave %v", err)
	}
	var small [4]byte
	if _, err := ReadSmall("/proc/self/stat", small[:]); !errors.Is(err, unix.EFBIG) {
		t.Fatalf("an oversized file gave %v", err)
	}
}

func TestAssessAndSignal(t *testing.T) {
	self, err := IdentityOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if Assess(self) != Alive {
		t.Fatalf("self not alive")
	}
	other := self
	other.BootID = "00000000-0000-0000-0000-000000000000"
	if Assess(other) != Gone {
		t.Fatalf("other boot should be gone")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id, err := IdentityOf(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	wrong := id
	wrong.StartTime++
	if err := SignalVerified(wrong, syscall.SIGKILL); err == nil {
		t.Fatal("signalled a mismatched identity")
	}
	if Assess(id) != Alive {
		t.Fatal("sleep should be alive")
	}
	if err := SignalVerified(id, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if Assess(id) != Gone {
		t.Fatal("reaped sleep should be gone")
	}
	if err := SignalVerified(id, syscall.SIGKILL); err == nil {
		t.Fatal("signalled a gone process")
	}
}

// A process that did not ask for it (a production hostfork) ignores
// BootIDEnv; a test binary that called SimulateBootForTests believes it
// (issue 39, item 11). Each case runs in a fresh process: the boot id is
// read once per process.
func TestSimulatedBootOnlyInTests(t *testing.T) {
	if mode := os.Getenv("HOSTFORK_LINUX_TEST_BOOT"); mode != "" {
		if mode == "simulate" {
			SimulateBootForTests()
		}
		id, err := BootID()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("boot=" + id)
		return
	}
	real, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]string{"production": strings.TrimSpace(string(real)), "simulate": "fake-boot"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSimulatedBootOnlyInTests$", "-test.v")
		cmd.Env = append(os.Environ(), "HOSTFORK_LINUX_TEST_BOOT="+mode, BootIDEnv+"=fake-boot")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		if !strings.Contains(string(out), "boot="+want+"\n") {
			t.Errorf("%s: want boot id %s:\n%s", mode, want, out)
		}
	}
}
