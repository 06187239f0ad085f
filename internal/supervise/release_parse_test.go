package supervise

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// rawGuardian is one guardian started by the test in the subreaper tier
// (no cgroup), released with a message the test frames itself: the
// guardian's own parser (hf_parse_msg) is what is tested, not
// encodeRelease. The workloads used here exit by themselves; cleanup
// kills the guardian by its PID if a test left it running.
type rawGuardian struct {
	t      *testing.T
	g      *Guardian
	dir    string
	reaped bool
}

func startRaw(t *testing.T) *rawGuardian {
	t.Helper()
	dir := t.TempDir()
	create := func(name string, flag int) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC|flag, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Start(StartSpec{
		Exe:     exe,
		Receipt: create("receipt", os.O_RDWR),
		Stdout:  create("stdout", os.O_WRONLY|os.O_APPEND),
		Stderr:  create("stderr", os.O_WRONLY|os.O_APPEND),
		Log:     create("guardian.log", os.O_WRONLY|os.O_APPEND),
		Setsid:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawGuardian{t: t, g: g, dir: dir}
	t.Cleanup(func() {
		if !r.reaped {
			// The workload first (verified by its start time): killed,
			// the guardian would leave it to init.
			if b, err := os.ReadFile(filepath.Join(dir, "receipt")); err == nil {
				if rc, err := ParseReceipt(b); err == nil && rc.WorkloadPID > 0 {
					_ = linux.SignalVerified(linux.Identity{BootID: rc.BootID, PID: rc.WorkloadPID, StartTime: rc.WorkloadStart}, syscall.SIGKILL)
				}
			}
			_ = syscall.Kill(g.ID.PID, syscall.SIGKILL)
			_, _ = g.Reap()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "guardian.log"))
			t.Logf("guardian.log:\n%s", b)
		}
	})
	return r
}

// send writes entries as one framed release and closes the control pipe
// (an owner gone: the default detach leaves the workload running, and
// these workloads exit by themselves).
func (r *rawGuardian) send(entries ...string) {
	r.t.Helper()
	body := strings.Join(entries, "\x00") + "\x00"
	if _, err := r.g.control.Write(frameMsg([]byte(body))); err != nil {
		r.t.Fatal(err)
	}
}

// exit waits for the guardian to exit and returns its exit code.
func (r *rawGuardian) exit() int {
	r.t.Helper()
	type res struct {
		ws  syscall.WaitStatus
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ws, err := r.g.Reap()
		ch <- res{ws, err}
	}()
	select {
	case x := <-ch:
		r.reaped = true
		if x.err != nil || !x.ws.Exited() {
			r.t.Fatalf("guardian wait status %#x (%v)", uint32(x.ws), x.err)
		}
		return x.ws.ExitStatus()
	case <-time.After(20 * time.Second):
		r.t.Fatal("the guardian did not exit")
	}
	return -1
}

func (r *rawGuardian) file(name string) string {
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

// argv and env are lists of the table (kind 'v'), each with its own room:
// their entries may come in any order and interleave, and each keeps its
// own order; values keep their spaces and '='.
func TestReleaseListsInAnyOrder(t *testing.T) {
	r := startRaw(t)
	r.send("command_id=c1", "env=B=2", "path=/bin/sh", "argv=sh", "env=A=1=x", "argv=-c",
		`argv=printf '[%s]' "$0" "$@"; echo "|$A|$B|"`, "env=PATH=/usr/bin:/bin", "argv=zero", "argv=y z")
	if code := r.exit(); code != 0 {
		t.Fatalf("guardian exit %d, want 0", code)
	}
	if got, want := r.file("stdout"), "[zero][y z]|1=x|2|\n"; got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
}

// The shortest entries ("argv=" and "env=", empty values) fill the pointer
// rooms hf_read_msg leaves after the message the most: every value still
// reaches the workload, in its list.
func TestReleaseShortestEntries(t *testing.T) {
	const n = 20000
	r := startRaw(t)
	entries := []string{"command_id=c1", "path=/bin/sh", "env=PATH=/usr/bin:/bin"}
	for i := 0; i < n/2; i++ {
		entries = append(entries, "env=")
	}
	entries = append(entries, "argv=sh", "argv=-c", `argv=echo $#; tr -cd '\000' < /proc/$$/environ | wc -c`, "argv=zero")
	for i := 0; i < n; i++ {
		entries = append(entries, "argv=")
	}
	for i := 0; i < n/2; i++ {
		entries = append(entries, "env=")
	}
	r.send(entries...)
	if code := r.exit(); code != 0 {
		t.Fatalf("guardian exit %d, want 0", code)
	}
	if got, want := strings.Fields(r.file("stdout")), []string{strconv.Itoa(n), strconv.Itoa(n + 1)}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("argc and environ strings %q, want %q (stderr %q)", got, want, r.file("stderr"))
	}
}

// A message the guardian can't take whole is refused: exit 125, nothing
// started, an empty receipt (nothing ran), and the reason in its log —
// never a value cut to fit or an entry skipped.
func TestReleaseRefused(t *testing.T) {
	join := make([]string, maxJoin+1)
	for i := range join {
		join[i] = "v1_join=/nonexistent/cgroup.procs"
	}
	cases := []struct {
		name    string
		entries []string
	}{
		{"unknown key", []string{"colour=blue"}},
		{"no '='", []string{"junk"}},
		{"command id too long", []string{"command_id=" + strings.Repeat("c", maxID+1)}},
		{"boot id too long", []string{"boot_id=" + strings.Repeat("b", maxID+1)}},
		{"deadline file too long", []string{"deadline_file=/" + strings.Repeat("d", maxPath)}},
		{"too many v1 groups", join},
		{"number out of range", []string{"tty_rows=65536"}},
		{"not a number", []string{"grace_ns=12x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := startRaw(t)
			marker := filepath.Join(r.dir, "ran")
			r.send(append([]string{"path=/usr/bin/touch", "argv=touch", "argv=" + marker}, c.entries...)...)
			if code := r.exit(); code != 125 {
				t.Fatalf("guardian exit %d, want 125", code)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Fatalf("the workload ran (%v)", err)
			}
			if b := r.file("receipt"); b != "" {
				t.Fatalf("receipt %q, want empty", b)
			}
			if l := r.file("guardian.log"); !strings.Contains(l, "bad release message") {
				t.Fatalf("guardian.log %q", l)
			}
		})
	}
}

// v1_join carries each group's cgroup.procs file (encodeRelease adds the
// name): the workload writes itself ("0") into exactly that file before it
// runs. A regular file stands in for the group's here.
func TestReleaseV1JoinFile(t *testing.T) {
	r := startRaw(t)
	group := filepath.Join(r.dir, "group")
	if err := os.Mkdir(group, 0o700); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(group, "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.g.Release(&Config{CommandID: "c1", Path: "/bin/echo", Argv: []string{"echo", "ran"}, Output: OutputFiles,
		OwnerExit: OwnerExitDetach, V1Join: []string{group}}); err != nil {
		t.Fatal(err)
	}
	if code := r.exit(); code != 0 {
		t.Fatalf("guardian exit %d, want 0", code)
	}
	if got := r.file("stdout"); got != "ran\n" {
		t.Fatalf("stdout %q", got)
	}
	if got := r.file("group/cgroup.procs"); got != "0" {
		t.Fatalf("cgroup.procs %q, want \"0\"", got)
	}
}

// deadline_file names the environment's moved deadline (RunDir/deadline),
// read at the release: a deadline moved before it holds, however far the
// release's own is.
func TestReleaseReadsMovedDeadline(t *testing.T) {
	r := startRaw(t)
	if err := MoveDeadline(r.dir, linux.MonotonicNow()+200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.g.Release(&Config{CommandID: "c1", Path: "/bin/sleep", Argv: []string{"sleep", "60"}, Output: OutputFiles,
		OwnerExit: OwnerExitDetach, Grace: 100 * time.Millisecond, DeadlineMono: linux.MonotonicNow() + time.Hour, RunDir: r.dir}); err != nil {
		t.Fatal(err)
	}
	if code := r.exit(); code != 0 {
		t.Fatalf("guardian exit %d, want 0", code)
	}
	rc, err := ParseReceipt([]byte(r.file("receipt")))
	if err != nil {
		t.Fatal(err)
	}
	if !rc.Complete || rc.StopReason != api.ReasonDeadline || rc.Signal == nil {
		t.Fatalf("receipt %+v, want a tree stopped by the deadline", rc)
	}
}

// A helper maps room for its message and the pointers it builds after it,
// sized by the message, not by the largest one allowed (16 MiB times five,
// committed in full where overcommit is strict): a small release is taken
// with little address space to spare (RLIMIT_AS, set on the guardian at
// its gate, before it maps anything).
func TestReleaseMapsWhatTheMessageNeeds(t *testing.T) {
	r := startRaw(t)
	var vm uint64
	for end := time.Now().Add(10 * time.Second); vm == 0; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(r.g.ID.PID) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "VmSize:" {
				vm, _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
		if time.Now().After(end) {
			t.Fatal("no VmSize for the guardian")
		}
	}
	// Room for what the guardian maps after the gate (its tee buffers
	// are static; a timerfd, pipes) and 32 MiB more: less than 80 MiB.
	lim := unix.Rlimit{Cur: (vm << 10) + 32<<20, Max: (vm << 10) + 32<<20}
	if err := unix.Prlimit(r.g.ID.PID, unix.RLIMIT_AS, &lim, nil); err != nil {
		t.Fatal(err)
	}
	r.send("command_id=c1", "path=/bin/echo", "argv=echo", "argv=ran")
	if code := r.exit(); code != 0 {
		t.Fatalf("guardian exit %d, want 0", code)
	}
	if got := r.file("stdout"); got != "ran\n" {
		t.Fatalf("stdout %q", got)
	}
}
