package supervise

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

func TestCGuardianModeMatches(t *testing.T) {
	if got := cGuardianMode(); got != GuardianMode {
		t.Fatalf("C guardian mode %q, Go %q", got, GuardianMode)
	}
}

func TestEncodeRelease(t *testing.T) {
	cfg := &Config{
		CommandID:      "c1",
		EnvID:          "e1",
		Argv:           []string{"sh", "-c", "a=b\nc"},
		Path:           "/bin/sh",
		Env:            []string{"X=1", "Y="},
		Cwd:            "/tmp",
		Output:         OutputPipe,
		WorkloadCgroup: "/sys/fs/cgroup/x/workload",
		DeadlineMono:   5 * time.Second,
		Grace:          2 * time.Second,
		OwnerExit:      OwnerExitStop,
		Foreground:     true,
		ViewPID:        42,
		V1Join:         []string{"/sys/fs/cgroup/memory/x"},
		RunDir:         "/runs/e1",
	}
	boot, err := linux.BootID()
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodeRelease(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"command_id=c1", "env_id=e1", "path=/bin/sh",
		"argv=sh", "argv=-c", "argv=a=b\nc", "env=X=1", "env=Y=",
		"cwd=/tmp", "output=pipe", "workload_cgroup=/sys/fs/cgroup/x/workload",
		"v1_join=/sys/fs/cgroup/memory/x/cgroup.procs",
		"deadline_mono_ns=5000000000", "grace_ns=2000000000", "owner_exit=stop",
		"foreground=1", "view_pid=42", "view_start=0",
		"deadline_file=/runs/e1/deadline", "boot_id=" + boot,
	}, "\x00") + "\x00"
	if string(b) != string(frameMsg([]byte(want))) {
		t.Fatalf("release\n%q\nwant\n%q", b, want)
	}
	bad := *cfg
	bad.Env = []string{"X=a\x00b"}
	if _, err := encodeRelease(&bad); err == nil {
		t.Fatal("NUL in env accepted")
	}
	bad = *cfg
	bad.CommandID = strings.Repeat("x", maxID+1)
	if _, err := encodeRelease(&bad); err == nil {
		t.Fatal("oversized id accepted")
	}
	if _, err := encodeStop("a\nb"); err == nil {
		t.Fatal("newline in reason accepted")
	}
	if m, _ := encodeStop(api.ReasonUser); string(m) != "t1\n" {
		t.Fatalf("stop %q", m)
	}
	if m := encodeSignal(15); string(m) != "s15\n" {
		t.Fatalf("signal %q", m)
	}
}

// A malformed release makes the guardian exit 125 without starting
// anything (no cgroup needed: nothing may run).
func TestBadReleaseExits125(t *testing.T) {
	dir := t.TempDir()
	rf, err := os.OpenFile(dir+"/receipt", os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	log, err := os.Create(dir + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"\xff\xff\xff\xff", string(frameMsg([]byte("command_id=c\x00bogus_key=1\x00"))), string(frameMsg([]byte("command_id=c\x00")))} {
		g, err := Start(StartSpec{Exe: exe, Receipt: rf, Stdout: log, Stderr: log, Log: log, Setsid: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.control.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		g.Detach()
		if ws, err := g.Reap(); err != nil || !ws.Exited() || ws.ExitStatus() != 125 {
			t.Fatalf("release %q: guardian wait status %#x (%v), want exit 125", msg, uint32(ws), err)
		}
	}
	if st, _ := rf.Stat(); st.Size() != 0 {
		t.Fatal("a bad release wrote a receipt")
	}
	if b, _ := os.ReadFile(dir + "/log"); !bytes.Contains(b, []byte("bad release message")) {
		t.Fatalf("guardian log %q", b)
	}
}

// A guardian started with its command directory's parent (decision 56)
// opens the directory named by the command id after the release, beneath
// the parent, and logs there; an id that is not one path component, or
// longer than maxID, is never opened, and the diagnostics stay on its
// stderr.
func TestLateDirectoryGetsTheLog(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// An id over maxID bytes is refused whole: never cut to a name that
	// another command's directory may have (here the one made below).
	long := strings.Repeat("c", 255)
	for _, tc := range []struct{ id, made string }{{"c", "c"}, {"..", ""}, {"a/b", ""}, {long + "d", ""}} {
		dir := t.TempDir()
		parent, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := os.OpenFile(filepath.Join(dir, "receipt"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		log, err := os.Create(filepath.Join(dir, "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		g, err := Start(StartSpec{Exe: exe, Receipt: rf, Stdout: log, Stderr: log, Log: log, Parent: parent, Setsid: true})
		if err != nil {
			t.Fatal(err)
		}
		// The directory is made after the start, as an exec does.
		if err := os.MkdirAll(filepath.Join(dir, "c"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, long), 0o700); err != nil {
			t.Fatal(err)
		}
		// A release the guardian refuses after reading its command id.
		if _, err := g.control.Write(frameMsg([]byte("command_id=" + tc.id + "\x00bogus_key=1\x00"))); err != nil {
			t.Fatal(err)
		}
		g.Detach()
		if ws, err := g.Reap(); err != nil || !ws.Exited() || ws.ExitStatus() != 125 {
			t.Fatalf("id %q: guardian wait status %#x (%v), want exit 125", tc.id, uint32(ws), err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "c", "guardian.log"))
		if lb, _ := os.ReadFile(filepath.Join(dir, long, "guardian.log")); len(lb) != 0 {
			t.Errorf("id %q: logged under a cut id: %q", tc.id, lb)
		}
		stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
		if tc.made != "" {
			if !bytes.Contains(b, []byte("bad release message")) {
				t.Errorf("id %q: guardian.log %q (stderr %q)", tc.id, b, stderr)
			}
		} else if len(b) != 0 || !bytes.Contains(stderr, []byte("bad release message")) {
			t.Errorf("id %q: guardian.log %q, stderr %q", tc.id, b, stderr)
		}
		for _, f := range []*os.File{parent, rf, log} {
			f.Close()
		}
	}
}
