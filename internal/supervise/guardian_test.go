package supervise_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func TestMain(m *testing.M) {
	// The guardian is C: guardian.c's constructor runs it, before the Go
	// runtime starts, whenever this test binary is re-executed with
	// GuardianMode (supervise.Start does that). Reaching this point in that
	// mode means the constructor did not run.
	if len(os.Args) > 1 && (os.Args[1] == supervise.GuardianMode || os.Args[1] == supervise.KeeperMode) {
		os.Exit(supervise.NotDispatched(os.Args[1]))
	}
	os.Exit(m.Run())
}

// harness is one guardian started by the test, in a unique test cgroup:
// the guardian in <parent>/guardian, the workload cloned into
// <parent>/workload (cgroup2 tier) or left with the guardian (subreaper
// tier). Everything under the parent is killed and removed at cleanup,
// also when the test fails.
type harness struct {
	t        *testing.T
	dir      string
	parent   string
	workload string // "" in the subreaper tier
	mount    string // the cgroup2 mount
	g        *supervise.Guardian
	evs      <-chan supervise.Event
	seen     []supervise.Event
	receipt  string
	dev, ino uint64
	log      string
}

type launchOpts struct {
	subreaper bool // no workload cgroup
	pipe      bool // pipe mode: tee to files and forward pipes
}

func launch(t *testing.T, o launchOpts) *harness {
	t.Helper()
	parent := testutil.CgroupParent(t)
	h := &harness{t: t, dir: t.TempDir(), parent: parent}
	if m, err := cgroup.FindMount(); err == nil {
		h.mount = m.Path
	}
	gcg := filepath.Join(parent, "guardian")
	if _, err := cgroup.Create(gcg); err != nil {
		t.Fatal(err)
	}
	if !o.subreaper {
		h.workload = filepath.Join(parent, "workload")
		if _, err := cgroup.Create(h.workload); err != nil {
			t.Fatal(err)
		}
	}
	create := func(name string, flag int) *os.File {
		f, err := os.OpenFile(filepath.Join(h.dir, name), os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC|flag, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	rf := create("receipt", os.O_RDWR)
	var st unix.Stat_t
	if err := unix.Fstat(int(rf.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	h.receipt, h.dev, h.ino = rf.Name(), st.Dev, st.Ino
	stdout := create("stdout", os.O_WRONLY|os.O_APPEND)
	stderr := create("stderr", os.O_WRONLY|os.O_APPEND)
	logf := create("guardian.log", os.O_WRONLY|os.O_APPEND)
	h.log = logf.Name()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := supervise.Start(supervise.StartSpec{
		Exe:            exe,
		GuardianCgroup: gcg,
		Receipt:        rf,
		Stdout:         stdout,
		Stderr:         stderr,
		Forward:        o.pipe,
		Log:            logf,
		Setsid:         true,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	h.evs = g.Events()
	// Runs before CgroupParent's cleanup (LIFO): kill everything in the
	// test cgroup, then reap the guardian.
	t.Cleanup(func() {
		_ = cgroup.Open(parent).Kill()
		_, _ = g.Reap()
		if t.Failed() {
			if b, _ := os.ReadFile(h.log); len(b) > 0 {
				t.Logf("guardian.log:\n%s", b)
			}
		}
	})
	return h
}

// config returns a release config for argv with the harness's defaults.
func (h *harness) config(argv ...string) *supervise.Config {
	path := argv[0]
	if !strings.Contains(path, "/") {
		p, err := lookPath(path)
		if err != nil {
			h.t.Fatal(err)
		}
		path = p
	}
	return &supervise.Config{
		CommandID:      "cmd-" + filepath.Base(h.dir),
		EnvID:          "env-test",
		Argv:           argv,
		Path:           path,
		Env:            []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Cwd:            h.dir,
		Output:         supervise.OutputFiles,
		WorkloadCgroup: h.workload,
		CgroupMount:    h.mount,
		Grace:          2 * time.Second,
		OwnerExit:      supervise.OwnerExitDetach,
	}
}

func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode()&0o111 != 0 {
			return filepath.Join(d, name), nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func (h *harness) release(cfg *supervise.Config) {
	h.t.Helper()
	if err := h.g.Release(cfg); err != nil {
		h.t.Fatal(err)
	}
}

// next waits for the next event, which must be of the given kind, and
// returns the receipt as it is then (it holds what the event announces).
func (h *harness) next(kind string, timeout time.Duration) *supervise.Receipt {
	h.t.Helper()
	select {
	case ev, ok := <-h.evs:
		if !ok {
			h.t.Fatalf("events closed while waiting for %q (seen %+v)", kind, h.seen)
		}
		h.seen = append(h.seen, ev)
		if ev.Kind != kind {
			h.t.Fatalf("event %+v, want %q", ev, kind)
		}
		return h.readReceipt()
	case <-time.After(timeout):
		h.t.Fatalf("no %q event within %v (seen %+v)", kind, timeout, h.seen)
	}
	panic("unreachable")
}

// finish waits for the event stream to end and reaps the guardian, which
// must exit 0.
func (h *harness) finish() {
	h.t.Helper()
	select {
	case ev, ok := <-h.evs:
		if ok {
			h.t.Fatalf("unexpected event %+v after the last one", ev)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatal("event stream did not end")
	}
	if ws, err := h.g.Reap(); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		h.t.Fatalf("guardian wait status %#x (%v), want exit 0", uint32(ws), err)
	}
}

func (h *harness) readReceipt() *supervise.Receipt {
	h.t.Helper()
	r, err := supervise.ReadReceipt(h.receipt, "cmd-"+filepath.Base(h.dir), h.dev, h.ino)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) file(name string) string {
	b, err := os.ReadFile(filepath.Join(h.dir, name))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

// waitFile waits until name exists and is non-empty, and returns it.
func (h *harness) waitFile(name string) string {
	h.t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(h.dir, name)); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return strings.TrimSpace(string(b))
		}
	}
	h.t.Fatalf("%s was not written", name)
	return ""
}

// pidfdOf opens a pidfd for a live pid (to check later that exactly that
// process is gone).
func pidfdOf(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func exited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, 0)
	return n > 0
}

func populated(t *testing.T, path string) bool {
	ev, err := cgroup.Open(path).Events()
	if err != nil {
		t.Fatal(err)
	}
	return ev.Populated
}

// atGate waits until the guardian is blocked at its gate: it has made its
// signalfd, its last step before the gate, and sleeps (in the gate's poll:
// nothing after the signalfd blocks before the release). Anything it would
// do without a release, it would have done by then.
func (h *harness) atGate() {
	h.t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fd", h.g.ID.PID)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ents, _ := os.ReadDir(fdDir)
		sfd := false
		for _, e := range ents {
			l, _ := os.Readlink(filepath.Join(fdDir, e.Name()))
			sfd = sfd || l == "anon_inode:[signalfd]"
		}
		if st, err := linux.ReadStat(h.g.ID.PID); err == nil && sfd && st.State == 'S' {
			return
		}
		if time.Now().After(end) {
			h.t.Fatal("the guardian never blocked at its gate")
		}
	}
}

func TestGateAbortStartsNothing(t *testing.T) {
	h := launch(t, launchOpts{})
	// Blocked at the gate: alive, no child, nothing in the workload group.
	h.atGate()
	if linux.Assess(h.g.ID) != linux.Alive {
		t.Fatal("guardian not alive at the gate")
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", h.g.ID.PID, h.g.ID.PID))
	if err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(kids)) != 0 {
		t.Fatalf("guardian has children at the gate: %s", kids)
	}
	// EOF on the control pipe before the release: exit 0, nothing started.
	h.g.Detach()
	h.finish()
	if len(h.seen) != 0 {
		t.Fatalf("events from an aborted launch: %+v", h.seen)
	}
	if b := h.file("receipt"); b != "" {
		t.Fatalf("aborted launch wrote a receipt: %q", b)
	}
	if populated(t, h.workload) || populated(t, filepath.Join(h.parent, "guardian")) {
		t.Fatal("something is left in the test cgroup")
	}
}

// A stop request (SIGTERM, as a stopper queues it) at the gate ends the
// guardian there: exit 0, nothing started, no receipt written (an empty
// receipt of a gone guardian is decide.Evidence.Unreleased), and the
// launcher's release finds no reader.
func TestStopAtGateStartsNothing(t *testing.T) {
	h := launch(t, launchOpts{})
	h.atGate()
	fd := pidfdOf(t, h.g.ID.PID)
	defer unix.Close(fd)
	p, err := linux.OpenVerified(h.g.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SignalValue(syscall.SIGTERM, supervise.StopValue(api.ReasonUser, true, time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !exited(fd) {
		if time.Now().After(deadline) {
			t.Fatal("the guardian stayed at its gate after a stop request")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := h.g.Release(h.config("/bin/sh", "-c", "touch "+filepath.Join(h.dir, "ran"))); err == nil {
		t.Fatal("a release reached a guardian that ended at its gate")
	}
	h.finish()
	if len(h.seen) != 0 {
		t.Fatalf("events from a guardian stopped at its gate: %+v", h.seen)
	}
	if b := h.file("receipt"); b != "" {
		t.Fatalf("a guardian stopped at its gate wrote a receipt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "ran")); err == nil {
		t.Fatal("the workload ran")
	}
	if populated(t, h.workload) {
		t.Fatal("something is left in the workload cgroup")
	}
}

func TestExecFailureCodes(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte{0x7f, 0x01, 0x02, 0x03, 0x04, 0x05}, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, cwd string
		code            int
		msg             string
	}{
		{"missing", filepath.Join(dir, "missing"), "", 127, "no such file or directory"},
		{"not-executable", plain, "", 126, "permission denied"},
		{"directory", dir, "", 126, "permission denied"},
		{"bad-format", garbage, "", 126, "exec format error"},
		{"missing-cwd", "/bin/true", filepath.Join(dir, "nowhere"), 127, "no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := launch(t, launchOpts{})
			cfg := h.config(c.path)
			if c.cwd != "" {
				cfg.Cwd = c.cwd
			}
			h.release(cfg)
			ev := h.next("exec-failed", 10*time.Second)
			h.finish()
			if ev.ExitCode == nil || *ev.ExitCode != c.code {
				t.Fatalf("exec-failed %+v, want code %d", ev, c.code)
			}
			want := "starting " + c.path + ": " + c.msg
			r := h.readReceipt()
			if !r.Complete || r.StartError != want || r.ExitCode == nil || *r.ExitCode != c.code ||
				r.WorkloadPID != 0 || r.LeaderExited == nil || r.TreeExited == nil {
				t.Fatalf("receipt %+v", r)
			}
		})
	}
}

func TestRunReceiptAndEvents(t *testing.T) {
	h := launch(t, launchOpts{})
	before := time.Now()
	h.release(h.config("sh", "-c", "echo out; echo err >&2; exit 3"))
	started := h.next("started", 10*time.Second)
	leader := h.next("leader", 10*time.Second)
	tree := h.next("tree", 10*time.Second)
	h.finish()
	if started.WorkloadPID <= 0 || started.WorkloadStart == 0 {
		t.Fatalf("started %+v", started)
	}
	if leader.ExitCode == nil || *leader.ExitCode != 3 || leader.Signal != nil {
		t.Fatalf("leader %+v", leader)
	}
	if tree.StopReason != "" || !tree.Complete {
		t.Fatalf("tree %+v", tree)
	}
	if at := leader.LeaderExited; at == nil || at.Location() != time.UTC || at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Fatalf("leader exit time %v", at)
	}
	r := h.readReceipt()
	boot, _ := linux.BootID()
	if !r.Complete || r.ExitCode == nil || *r.ExitCode != 3 || r.Signal != nil ||
		r.WorkloadPID != started.WorkloadPID || r.WorkloadStart != started.WorkloadStart ||
		r.BootID != boot || r.Guardian != h.g.ID.PID || r.EnvID != "env-test" ||
		r.ProofDev != h.dev || r.ProofIno != h.ino || r.StopReason != "" || r.StartError != "" {
		t.Fatalf("receipt %+v", r)
	}
	if r.LeaderExited == nil || r.TreeExited == nil || r.TreeExited.Before(*r.LeaderExited) ||
		r.LeaderExited.Before(before.Add(-time.Second)) {
		t.Fatalf("receipt times %v %v", r.LeaderExited, r.TreeExited)
	}
	if got := h.file("stdout"); got != "out\n" {
		t.Fatalf("stdout %q", got)
	}
	if got := h.file("stderr"); got != "err\n" {
		t.Fatalf("stderr %q", got)
	}
}

// The workload gets exactly argv, env and cwd, and its own process group,
// in the workload cgroup.
func TestWorkloadProcessState(t *testing.T) {
	h := launch(t, launchOpts{})
	script := `printf '[%s]' "$@"; echo
printf '%s|' "$A" "$B"; echo
pwd
echo "$$ $(cut -d' ' -f5 /proc/$$/stat)"
grep '^0::' /proc/$$/cgroup`
	cfg := h.config("sh", "-c", script, "sh", "a b", "", "c=d")
	cfg.Env = append(cfg.Env, "A=1=2", "B=line1\nline2")
	h.release(cfg)
	h.next("started", 10*time.Second)
	h.next("leader", 10*time.Second)
	h.next("tree", 10*time.Second)
	h.finish()
	out := h.file("stdout")
	if e := h.file("stderr"); e != "" {
		t.Fatalf("stderr %q", e)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 6 {
		t.Fatalf("stdout %q", out)
	}
	m, err := cgroup.FindMount()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"[a b][][c=d]",
		"1=2|line1",
		"line2|",
		h.dir,
	}
	for i, w := range want {
		if lines[i] != w {
			t.Fatalf("line %d: %q, want %q\n%s", i, lines[i], w, out)
		}
	}
	if f := strings.Fields(lines[4]); len(f) != 2 || f[0] != f[1] {
		t.Fatalf("workload is not its own process group leader: %q", lines[4])
	}
	if got, want := lines[5], "0::"+strings.TrimPrefix(h.workload, m.Path); got != want {
		t.Fatalf("cgroup %q, want %q", got, want)
	}
}

// What the exec'ed workload inherits, seen from outside: descriptors 0-2
// only (not the receipt, the protocol pipes or the artifact files behind
// them), default signal dispositions and an empty signal mask, in both
// output modes.
func TestWorkloadInheritsOnlyStdio(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		t.Run(map[bool]string{false: "files", true: "pipe"}[pipe], func(t *testing.T) {
			h := launch(t, launchOpts{pipe: pipe})
			cfg := h.config("sleep", "60")
			if pipe {
				cfg.Output = supervise.OutputPipe
				go io.Copy(io.Discard, h.g.ForwardOut)
				go io.Copy(io.Discard, h.g.ForwardErr)
			}
			h.release(cfg)
			started := h.next("started", 10*time.Second)
			// sleep itself may open a locale file while it starts; an
			// inherited descriptor would stay.
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", started.WorkloadPID))
				if err != nil {
					t.Fatal(err)
				}
				var fds []string
				for _, e := range ents {
					fds = append(fds, e.Name())
				}
				if strings.Join(fds, " ") == "0 1 2" {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("workload fds %v, want 0 1 2", fds)
				}
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", started.WorkloadPID))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"SigBlk", "SigIgn"} {
				if !strings.Contains(string(status), k+":\t0000000000000000\n") {
					t.Fatalf("workload %s not empty:\n%s", k, status)
				}
			}
			if err := h.g.RequestStop(api.ReasonUser); err != nil {
				t.Fatal(err)
			}
			h.next("leader", 10*time.Second)
			h.next("tree", 10*time.Second)
			h.finish()
		})
	}
}

func TestSignalAndStopRequests(t *testing.T) {
	t.Run("signal", func(t *testing.T) {
		h := launch(t, launchOpts{})
		h.release(h.config("sleep", "60"))
		h.next("started", 10*time.Second)
		if err := h.g.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		leader := h.next("leader", 10*time.Second)
		tree := h.next("tree", 10*time.Second)
		h.finish()
		if leader.Signal == nil || *leader.Signal != int(syscall.SIGUSR1) || tree.StopReason != "" {
			t.Fatalf("leader %+v tree %+v", leader, tree)
		}
		if r := h.readReceipt(); r.Signal == nil || *r.Signal != int(syscall.SIGUSR1) || r.ExitCode != nil {
			t.Fatalf("receipt %+v", r)
		}
	})
	t.Run("stop", func(t *testing.T) {
		h := launch(t, launchOpts{})
		// A child that ignores SIGTERM keeps the guardian there for the
		// grace (2 s), so the second request finds it: with a lone sleep
		// the tree could be gone, and the guardian with it, before the
		// second write (EPIPE under load).
		armed := filepath.Join(h.dir, "armed")
		h.release(h.config("sh", "-c", `sh -c 'trap "" TERM; touch `+armed+`; exec sleep 60' & exec sleep 60`))
		h.next("started", 10*time.Second)
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(armed); err == nil {
				break
			}
			if time.Now().After(end) { // a safety bound only
				t.Fatal("the child that ignores SIGTERM never started")
			}
		}
		if err := h.g.RequestStop(api.ReasonLimit); err != nil {
			t.Fatal(err)
		}
		// A later reason does not replace the first.
		if err := h.g.RequestStop(api.ReasonUser); err != nil {
			t.Fatal(err)
		}
		leader := h.next("leader", 10*time.Second)
		tree := h.next("tree", 10*time.Second)
		h.finish()
		if leader.Signal == nil || *leader.Signal != int(syscall.SIGTERM) || tree.StopReason != api.ReasonLimit {
			t.Fatalf("leader %+v tree %+v", leader, tree)
		}
		if r := h.readReceipt(); r.StopReason != api.ReasonLimit || !r.Complete {
			t.Fatalf("receipt %+v", r)
		}
	})
}

// Pipe mode: after the forward reader goes away, the guardian keeps
// writing the artifact file; the forward copy was an exact prefix.
func TestPipeTeeSurvivesForwardReaderClose(t *testing.T) {
	h := launch(t, launchOpts{pipe: true})
	// The second part is larger than a pipe buffer, so the forward copy
	// certainly hits the closed reader (EPIPE).
	cfg := h.config("sh", "-c", `seq 0 199 | sed s/^/line/
sleep 0.3
seq 200 19999 | sed s/^/line/
echo done >&2`)
	cfg.Output = supervise.OutputPipe
	h.release(cfg)
	errCh := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(h.g.ForwardErr)
		errCh <- string(b)
	}()
	// Read the first part, then close the reader while the workload is
	// still writing.
	var got bytes.Buffer
	br := bufio.NewReader(h.g.ForwardOut)
	for !strings.Contains(got.String(), "line199\n") {
		line, err := br.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			t.Fatalf("forward read: %v after %q", err, got.String())
		}
	}
	h.g.ForwardOut.Close()
	h.next("started", 10*time.Second)
	leader := h.next("leader", 20*time.Second)
	h.next("tree", 10*time.Second)
	h.finish()
	if leader.ExitCode == nil || *leader.ExitCode != 0 {
		t.Fatalf("leader %+v", leader)
	}
	var want strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	file := h.file("stdout")
	if file != want.String() {
		t.Fatalf("stdout file has %d bytes, want %d (tail %q)", len(file), want.Len(), file[max(0, len(file)-40):])
	}
	if !strings.HasPrefix(file, got.String()) {
		t.Fatal("forwarded output is not a prefix of the file")
	}
	if e := <-errCh; e != "done\n" {
		t.Fatalf("forwarded stderr %q", e)
	}
	if e := h.file("stderr"); e != "done\n" {
		t.Fatalf("stderr file %q", e)
	}
}

// Pipe mode with a slow reader: the forward copy is complete (the guardian
// waits for the reader instead of dropping data) and equals the file.
func TestPipeTeeSlowReaderGetsEverything(t *testing.T) {
	h := launch(t, launchOpts{pipe: true})
	cfg := h.config("sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x")
	cfg.Output = supervise.OutputPipe
	h.release(cfg)
	go io.Copy(io.Discard, h.g.ForwardErr)
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := h.g.ForwardOut.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		if got.Len()%(64<<10) < 4096 {
			time.Sleep(time.Millisecond)
		}
	}
	h.next("started", 10*time.Second)
	h.next("leader", 10*time.Second)
	h.next("tree", 10*time.Second)
	h.finish()
	if got.Len() != 1000000 || strings.Trim(got.String(), "x") != "" {
		t.Fatalf("forwarded %d bytes", got.Len())
	}
	if f := h.file("stdout"); f != got.String() {
		t.Fatalf("file has %d bytes", len(f))
	}
}

// The deadline fires without anyone asking: SIGTERM at deadline-grace,
// then SIGKILL at the deadline, for a tree that ignores SIGTERM.
func TestDeadlineKillsTreeIgnoringTERM(t *testing.T) {
	for _, tier := range []string{"cgroup2", "subreaper"} {
		t.Run(tier, func(t *testing.T) {
			h := launch(t, launchOpts{subreaper: tier == "subreaper"})
			cfg := h.config("sh", "-c", `trap '' TERM; sleep 60 & echo $! > child.pid; wait; wait`)
			cfg.Grace = 500 * time.Millisecond
			cfg.DeadlineMono = linux.MonotonicNow() + 1500*time.Millisecond
			begin := time.Now()
			h.release(cfg)
			h.next("started", 10*time.Second)
			child, _ := strconv.Atoi(h.waitFile("child.pid"))
			cfd := pidfdOf(t, child)
			leader := h.next("leader", 10*time.Second)
			tree := h.next("tree", 10*time.Second)
			elapsed := time.Since(begin)
			h.finish()
			if leader.Signal == nil || *leader.Signal != int(syscall.SIGKILL) {
				t.Fatalf("leader %+v: want killed by SIGKILL", leader)
			}
			if tree.StopReason != api.ReasonDeadline {
				t.Fatalf("tree %+v", tree)
			}
			if elapsed < 1400*time.Millisecond || elapsed > 10*time.Second {
				t.Fatalf("tree ended after %v, deadline was 1.5s", elapsed)
			}
			if !exited(cfd) {
				t.Fatal("the TERM-ignoring child survived")
			}
			if r := h.readReceipt(); !r.Complete || r.StopReason != api.ReasonDeadline {
				t.Fatalf("receipt %+v", r)
			}
		})
	}
}

// Owner exit with owner_exit=stop: closing the control pipe stops the
// tree, including a setsid grandchild that outlived the leader.
func TestOwnerExitStopsSetsidGrandchild(t *testing.T) {
	h := launch(t, launchOpts{})
	cfg := h.config("sh", "-c", `setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > gc.pid`)
	cfg.OwnerExit = supervise.OwnerExitStop
	cfg.Grace = 500 * time.Millisecond
	h.release(cfg)
	h.next("started", 10*time.Second)
	leader := h.next("leader", 10*time.Second)
	if leader.ExitCode == nil || *leader.ExitCode != 0 {
		t.Fatalf("leader %+v", leader)
	}
	gc, _ := strconv.Atoi(h.waitFile("gc.pid"))
	gfd := pidfdOf(t, gc)
	// $! is written right after the fork; wait for setsid to run.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sid, _ := unix.Getsid(gc)
		if sid == gc {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("grandchild %d is in session %d, want its own", gc, sid)
		}
	}
	if exited(gfd) {
		t.Fatal("grandchild ended before the owner left")
	}
	h.g.Detach() // the owner goes away
	tree := h.next("tree", 10*time.Second)
	h.finish()
	if tree.StopReason != api.ReasonOwnerExit {
		t.Fatalf("tree %+v", tree)
	}
	if !exited(gfd) {
		t.Fatal("setsid grandchild survived the owner's exit")
	}
	if populated(t, h.workload) {
		t.Fatal("workload cgroup still populated")
	}
	if r := h.readReceipt(); !r.Complete || r.StopReason != api.ReasonOwnerExit || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("receipt %+v", r)
	}
}

// Owner exit with owner_exit=detach: the tree keeps running.
func TestOwnerExitDetachKeepsRunning(t *testing.T) {
	h := launch(t, launchOpts{})
	h.release(h.config("sleep", "0.5"))
	started := h.next("started", 10*time.Second)
	h.g.Detach()
	leader := h.next("leader", 10*time.Second)
	tree := h.next("tree", 10*time.Second)
	h.finish()
	if leader.ExitCode == nil || *leader.ExitCode != 0 || tree.StopReason != "" {
		t.Fatalf("leader %+v tree %+v (started %+v)", leader, tree, started)
	}
}

// Subreaper tier: a double-forked setsid daemon is adopted by the guardian
// and reaped; the tree ends only when it is gone.
func TestSubreaperReapsDoubleForkedDaemon(t *testing.T) {
	h := launch(t, launchOpts{subreaper: true})
	h.release(h.config("sh", "-c", `(setsid sh -c 'echo $$ > daemon.pid; exec sleep 2' </dev/null >/dev/null 2>&1 &); exit 0`))
	h.next("started", 10*time.Second)
	leader := h.next("leader", 10*time.Second)
	leaderAt := time.Now()
	if leader.ExitCode == nil || *leader.ExitCode != 0 {
		t.Fatalf("leader %+v", leader)
	}
	d, _ := strconv.Atoi(h.waitFile("daemon.pid"))
	dfd := pidfdOf(t, d)
	st, err := linux.ReadStat(d)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != h.g.ID.PID {
		t.Fatalf("daemon %d has parent %d, want the guardian %d", d, st.PPID, h.g.ID.PID)
	}
	if r := h.readReceipt(); r.Complete {
		t.Fatalf("receipt complete while the daemon runs: %+v", r)
	}
	tree := h.next("tree", 10*time.Second)
	h.finish()
	if !exited(dfd) {
		t.Fatal("tree event before the daemon exited")
	}
	if time.Since(leaderAt) < time.Second {
		t.Fatalf("tree ended %v after the leader; the daemon sleeps 2s", time.Since(leaderAt))
	}
	if tree.StopReason != "" {
		t.Fatalf("tree %+v", tree)
	}
	if r := h.readReceipt(); !r.Complete || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("receipt %+v", r)
	}
}

// Subreaper tier: SIGTERM to the guardian (what `hostfork stop` sends in
// this tier) stops the tree, daemon included, with reason "user".
func TestSubreaperSIGTERMStopsTree(t *testing.T) {
	h := launch(t, launchOpts{subreaper: true})
	cfg := h.config("sh", "-c", `(setsid sh -c 'echo $$ > daemon.pid; trap "" TERM; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &); exec sleep 60`)
	cfg.Grace = 300 * time.Millisecond
	h.release(cfg)
	h.next("started", 10*time.Second)
	d, _ := strconv.Atoi(h.waitFile("daemon.pid"))
	dfd := pidfdOf(t, d)
	if err := linux.SignalVerified(h.g.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	leader := h.next("leader", 10*time.Second)
	tree := h.next("tree", 10*time.Second)
	h.finish()
	if leader.Signal == nil || *leader.Signal != int(syscall.SIGTERM) {
		t.Fatalf("leader %+v", leader)
	}
	if tree.StopReason != api.ReasonUser || !exited(dfd) {
		t.Fatalf("tree %+v, daemon exited %v", tree, exited(dfd))
	}
}

// A plain SIGTERM that reaches the guardian at the gate (what `hostfork
// stop` sends in the subreaper tier) is a stop before the start: the
// guardian, which blocked SIGTERM first thing, ends there with status 0
// (not by the signal's default action) and starts nothing; the release
// finds no reader (decision 60).
func TestSIGTERMAtGateStartsNothing(t *testing.T) {
	h := launch(t, launchOpts{subreaper: true})
	// Wait until the constructor has blocked SIGTERM (before that, the
	// kernel's default action applies, as for any process that is still
	// starting).
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.g.ID.PID))
		_, rest, _ := strings.Cut(string(b), "SigBlk:")
		mask, _ := strconv.ParseUint(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 16, 64)
		if mask&(1<<(syscall.SIGTERM-1)) != 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the guardian never blocked SIGTERM")
		}
	}
	if err := linux.SignalVerified(h.g.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws, err := h.g.Reap(); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("guardian stopped at its gate: wait status %#x (%v), want exit status 0", uint32(ws), err)
	}
	if err := h.g.Release(h.config("sh", "-c", "touch "+filepath.Join(h.dir, "ran"))); err == nil {
		t.Fatal("a release reached a guardian that ended at its gate")
	}
	if b := h.file("receipt"); b != "" {
		t.Fatalf("receipt %q", b)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "ran")); err == nil {
		t.Fatal("the workload ran")
	}
}

// The guardian's anonymous memory while it supervises a sleeping workload
// stays under 1 MiB (it is C; the Go runtime never starts).
func TestGuardianMemory(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		t.Run(map[bool]string{false: "files", true: "pipe"}[pipe], func(t *testing.T) {
			h := launch(t, launchOpts{pipe: pipe})
			cfg := h.config("sh", "-c", "echo hello; exec sleep 60")
			if pipe {
				cfg.Output = supervise.OutputPipe
				go io.Copy(io.Discard, h.g.ForwardOut)
				go io.Copy(io.Discard, h.g.ForwardErr)
			}
			h.release(cfg)
			h.next("started", 10*time.Second)
			// The workload has written its output (and in pipe mode the
			// guardian has copied it): the guardian has done its work.
			if out := h.waitFile("stdout"); out != "hello" {
				t.Fatalf("stdout %q", out)
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.g.ID.PID))
			if err != nil {
				t.Fatal(err)
			}
			fields := map[string]int{}
			for _, line := range strings.Split(string(status), "\n") {
				k, v, ok := strings.Cut(line, ":")
				if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
					fields[k], _ = strconv.Atoi(f[0])
				}
			}
			t.Logf("guardian: RssAnon %d kB, RssFile %d kB, VmRSS %d kB", fields["RssAnon"], fields["RssFile"], fields["VmRSS"])
			if fields["RssAnon"] == 0 || fields["RssAnon"] > 1024 {
				t.Fatalf("guardian RssAnon %d kB, want at most 1024", fields["RssAnon"])
			}
			if err := h.g.RequestStop(api.ReasonUser); err != nil {
				t.Fatal(err)
			}
			h.next("leader", 10*time.Second)
			h.next("tree", 10*time.Second)
			h.finish()
		})
	}
}
