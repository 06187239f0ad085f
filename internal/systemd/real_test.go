package systemd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// inside is a process started inside the container with nsenter, as the
// host and the container number it.
type inside struct {
	cmd     *exec.Cmd
	nsPID   uint32
	hostPID int
	pidfd   int
	lines   chan stamped
}

type stamped struct {
	text string
	mono time.Duration // CLOCK_MONOTONIC when the line arrived
}

func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// startInside runs "sh -c 'echo $$; SCRIPT'" inside the container and
// returns once the shell said its PID. The process is killed at cleanup
// (through a pidfd, so never a reused PID).
func startInside(t *testing.T, n *testutil.Nspawn, script string) *inside {
	t.Helper()
	cmd := n.Command(context.Background(), "sh", "-c", "echo $$; "+script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &inside{cmd: cmd, pidfd: -1, lines: make(chan stamped, 16)}
	t.Cleanup(func() {
		if p.pidfd >= 0 {
			_ = unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
			unix.Close(p.pidfd)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("nsenter %d did not end", cmd.Process.Pid)
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- stamped{sc.Text(), monoNow()}
		}
		close(p.lines)
	}()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("process inside the container said nothing")
		}
		v, err := strconv.ParseUint(strings.TrimSpace(l.text), 10, 32)
		if err != nil {
			t.Fatalf("process inside the container said %q", l.text)
		}
		p.nsPID = uint32(v)
	case <-time.After(10 * time.Second):
		t.Fatalf("process inside the container did not start")
	}
	// nsenter forked it into the container's PID namespace: it is
	// nsenter's child.
	for i := 0; i < 200 && p.hostPID == 0; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			p.hostPID, _ = strconv.Atoi(f[0])
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if p.hostPID == 0 {
		t.Fatalf("can't find the host PID of container PID %d", p.nsPID)
	}
	if p.pidfd, err = unix.PidfdOpen(p.hostPID, 0); err != nil {
		t.Fatalf("pidfd_open(%d): %v", p.hostPID, err)
	}
	return p
}

// exited reports whether the process has exited (its pidfd is readable).
func (p *inside) exited(timeout time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, int(timeout/time.Millisecond))
	return n > 0
}

// members hands the process over the way the manager allows: PIDFDs when it
// takes them, else its container PID, explicitly.
func (p *inside) members() (Members, ScopeOptions) {
	return Members{PIDFDs: []int{p.pidfd}, PIDs: []uint32{p.nsPID}}, ScopeOptions{AllowPIDs: true}
}

func inCgroup(t *testing.T, dir string, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid))
}

// TestRealSystemd runs the scope tier against a real systemd booted in a
// throwaway container, talking to it from the host through the
// container's system bus socket, with processes started inside it.
func TestRealSystemd(t *testing.T) {
	n := testutil.BootSystemd(t, testutil.NspawnOptions{})
	mount, err := cgroup.FindMount()
	if err != nil {
		t.Fatal(err)
	}
	managerRoot, err := ManagerRoot(n.InitPID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	t0 := time.Now()
	c, err := Connect(ctx, SocketBus(n.BusSocket()), Options{CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Logf("connected to %s in %v", c.bus, time.Since(t0).Round(time.Microsecond))
	pidfds, version, err := c.SupportsPIDFDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manager version %s: PIDFDs at scope creation: %v", version, pidfds)

	t.Run("PIDFDs", func(t *testing.T) {
		p := startInside(t, n, "exec sleep 600")
		s, err := c.StartScope(ctx, "hf-pidfd.scope", Members{PIDFDs: []int{p.pidfd}}, ScopeOptions{})
		if pidfds {
			if err != nil {
				t.Fatal(err)
			}
			if s.Membership != ByPIDFDs || s.Fallback != "" {
				t.Fatalf("membership %s (%s)", s.Membership, s.Fallback)
			}
			if _, err := c.StopUnit(ctx, s.Name); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, ErrPIDFDsUnsupported) {
			t.Fatalf("systemd %s: want ErrPIDFDsUnsupported, got %v", version, err)
		}
		t.Logf("refused before sending, as it should: %v", err)
		// What the manager itself says to PIDFDs it does not know.
		l, err := c.current(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.sd.StartTransientUnitContext(ctx, "hf-raw-pidfd.scope", "fail", []sd.Property{
			{Name: "PIDFDs", Value: dbus.MakeVariant([]dbus.UnixFD{dbus.UnixFD(p.pidfd)})},
		}, nil)
		if err == nil {
			t.Fatalf("systemd %s accepted PIDFDs although it is older than %d", version, PIDFDsSince)
		}
		t.Logf("systemd %s answers PIDFDs with: %v", version, err)
		// The explicit fallback works and says so.
		m, opts := p.members()
		s, err = c.StartScope(ctx, "hf-pidfd.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		if s.Membership != ByPIDs || s.Fallback == "" {
			t.Fatalf("membership %s, fallback %q", s.Membership, s.Fallback)
		}
		t.Logf("explicit fallback: %s", s.Fallback)
		if _, err := c.StopUnit(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DelegateAndStop", func(t *testing.T) {
		p := startInside(t, n, "exec sleep 600")
		m, opts := p.members()
		opts.Description = "hostfork test scope"
		s, err := c.StartScope(ctx, "hf-delegate.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("StartTransientUnit answered in %v, job done %v later; state %s/%s, cgroup %s",
			s.CallLatency.Round(time.Microsecond), s.JobLatency.Round(time.Microsecond), s.State.ActiveState, s.State.SubState, s.State.ControlGroup)
		if !s.State.Delegate || s.State.RuntimeMax != 0 {
			t.Fatalf("state %+v", s.State)
		}
		dir := CgroupPath(mount.Path, managerRoot, s.State.ControlGroup)
		if !inCgroup(t, dir, p.hostPID) {
			t.Fatalf("host pid %d is not in %s", p.hostPID, dir)
		}
		// Delegated: we may build a subtree, and the manager leaves it
		// alone across a reload.
		sub := filepath.Join(dir, "workload")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatalf("creating a child group in the delegated scope: %v", err)
		}
		if err := os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(strconv.Itoa(p.hostPID)), 0); err != nil {
			t.Fatalf("moving into the child group: %v", err)
		}
		tr := time.Now()
		n.Run(t, "systemctl", "daemon-reload")
		t.Logf("daemon-reload took %v", time.Since(tr).Round(time.Millisecond))
		if !inCgroup(t, sub, p.hostPID) {
			t.Fatalf("after daemon-reload, pid %d left the delegated child group", p.hostPID)
		}
		ts := time.Now()
		st, err := c.StopUnit(ctx, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("StopUnit returned in %v: %s/%s result %q", time.Since(ts).Round(time.Millisecond), st.ActiveState, st.SubState, st.Result)
		if !p.exited(5 * time.Second) {
			t.Fatal("the scope's process survived StopUnit")
		}
		if !(st.Gone() || st.Ended()) {
			t.Fatalf("after stop: %+v", st)
		}
		// The manager removes the scope's cgroup, delegated child
		// included, once the scope is dead.
		for i := 0; ; i++ {
			_, err := os.Stat(dir)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if i == 100 {
				t.Fatalf("the scope's cgroup %s (with its delegated child) is still there 5 s after the stop: %v", dir, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Stopping again (the unit is collected by now) is not an error.
		if _, err := c.StopUnit(ctx, s.Name); err != nil {
			t.Fatalf("second stop: %v", err)
		}
	})

	t.Run("Latency", func(t *testing.T) {
		p := startInside(t, n, "exec sleep 600")
		var calls, jobs []time.Duration
		for i := 0; i < 10; i++ {
			// Each scope takes the process over from the previous one,
			// which then empties and is collected.
			m, opts := p.members()
			s, err := c.StartScope(ctx, fmt.Sprintf("hf-latency-%d.scope", i), m, opts)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, s.CallLatency)
			jobs = append(jobs, s.CallLatency+s.JobLatency)
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i] < calls[j] })
		sort.Slice(jobs, func(i, j int) bool { return jobs[i] < jobs[j] })
		t.Logf("StartTransientUnit over the bus socket, 10 scopes: call median %v (min %v, max %v); call+job median %v (max %v)",
			calls[5].Round(time.Microsecond), calls[0].Round(time.Microsecond), calls[9].Round(time.Microsecond),
			jobs[5].Round(time.Microsecond), jobs[9].Round(time.Microsecond))
		if _, err := c.StopUnit(ctx, "hf-latency-9.scope"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DeadlineKill", func(t *testing.T) {
		// A process that notes SIGTERM and keeps running: the manager
		// must SIGTERM it at max_runtime-grace and SIGKILL it at
		// max_runtime.
		p := startInside(t, n, `trap 'echo TERM' TERM; while :; do sleep 0.05; done`)
		m, opts := p.members()
		opts.Deadline = &Deadline{MaxRuntime: 3 * time.Second, Grace: time.Second}
		opts.Ref = true // keep the failed unit loaded to read its Result (the container goes with the test)
		s, err := c.StartScope(ctx, "hf-deadline.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		act := s.State.ActiveEnterMono
		if act == 0 {
			t.Fatalf("no activation time: %+v", s.State)
		}
		var term time.Duration
		select {
		case l := <-p.lines:
			if l.text != "TERM" {
				t.Fatalf("process said %q", l.text)
			}
			term = l.mono - act
		case <-time.After(6 * time.Second):
			t.Fatal("no SIGTERM within 6 s")
		}
		if !p.exited(5 * time.Second) {
			t.Fatal("not killed within 5 s of SIGTERM")
		}
		killed := monoNow() - act
		var st *UnitState
		for i := 0; i < 100; i++ {
			if st, err = c.State(ctx, s.Name); err == nil && st.Ended() {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		ran := st.InactiveEnterMono - st.ActiveEnterMono
		t.Logf("deadline 3s with 1s grace: SIGTERM seen %v after activation, process gone %v after, scope %s/%s result %q after %v (manager's monotonic clock)",
			term.Round(time.Millisecond), killed.Round(time.Millisecond), st.ActiveState, st.SubState, st.Result, ran.Round(time.Millisecond))
		if st.Result != "timeout" || st.ActiveState != "failed" {
			t.Errorf("want failed with result timeout, got %+v", st)
		}
		if term < 1950*time.Millisecond || term > 2800*time.Millisecond {
			t.Errorf("SIGTERM %v after activation, want about 2 s (max_runtime - grace)", term)
		}
		if killed < 2950*time.Millisecond || killed > 3900*time.Millisecond {
			t.Errorf("process gone %v after activation, want about 3 s (max_runtime)", killed)
		}
		// The manager arms its unit timers with sd-event's default
		// accuracy of 250 ms, so each of the two firings may come late.
		if ran < 2950*time.Millisecond || ran > 3800*time.Millisecond {
			t.Errorf("scope ran %v, want about 3 s", ran)
		}
	})

	t.Run("MoveDeadline", func(t *testing.T) {
		// A deadline of 3 s moved to 6 s after activation: the manager
		// sends SIGTERM at the new deadline - grace, not the old one.
		p := startInside(t, n, `trap 'echo TERM; exit 0' TERM; while :; do sleep 0.05; done`)
		m, opts := p.members()
		opts.Deadline = &Deadline{MaxRuntime: 3 * time.Second, Grace: time.Second}
		s, err := c.StartScope(ctx, "hf-move.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		act := s.State.ActiveEnterMono
		if err := c.MoveDeadline(ctx, s.Name, act+6*time.Second, time.Second); errors.Is(err, ErrReadOnly) {
			// This manager can't move it: nothing changed.
			st, serr := c.State(ctx, s.Name)
			if serr != nil || st.RuntimeMax != 2*time.Second {
				t.Fatalf("after a refused move: %v, RuntimeMax %v, want the 2 s it had", serr, st.RuntimeMax)
			}
			t.Logf("systemd %s refuses: %v", version, err)
			_, _ = c.StopUnit(ctx, s.Name)
			return
		} else if err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-p.lines:
			if term := l.mono - act; l.text != "TERM" || term < 4900*time.Millisecond {
				t.Fatalf("process said %q %v after activation, want TERM about 5 s after", l.text, term)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no SIGTERM within 10 s")
		}
		if err := c.MoveDeadline(ctx, s.Name, act+time.Hour, time.Second); !errors.Is(err, ErrInvalid) && err == nil {
			t.Errorf("moving the deadline of an ended scope: %v", err)
		}
	})

	t.Run("Recovery", func(t *testing.T) {
		p := startInside(t, n, "exec sleep 600")
		m, opts := p.members()
		opts.Deadline = &Deadline{MaxRuntime: 5 * time.Minute, Grace: 2 * time.Second}
		s, err := c.StartScope(ctx, "hf-recovery.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		check := func(after string) {
			t.Helper()
			var st *UnitState
			var err error
			for i := 0; i < 300; i++ { // the manager may be busy, or not yet back on the bus
				if st, err = c.State(ctx, s.Name); err == nil && st.LoadState == "loaded" {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("after %s: %v", after, err)
			}
			if st.ActiveState != "active" || st.ControlGroup != s.State.ControlGroup || st.RuntimeMax != s.State.RuntimeMax || st.ActiveEnterMono != s.State.ActiveEnterMono {
				t.Fatalf("after %s the scope changed: %+v, was %+v", after, st, s.State)
			}
			if !inCgroup(t, CgroupPath(mount.Path, managerRoot, st.ControlGroup), p.hostPID) {
				t.Fatalf("after %s the process left the scope", after)
			}
		}
		n.Run(t, "systemctl", "daemon-reexec")
		check("daemon-reexec")
		reconnects := func() int { c.mu.Lock(); defer c.mu.Unlock(); return c.reconnects }
		before := reconnects()
		// Restarting the bus breaks this connection; the next call
		// reconnects.
		n.Run(t, "systemctl", "restart", "dbus.service")
		check("a bus restart")
		if reconnects() <= before {
			t.Errorf("the connection was not replaced after the bus restart (reconnects %d)", reconnects())
		}
		if _, err := c.StopUnit(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
		if !p.exited(5 * time.Second) {
			t.Fatal("the scope's process survived StopUnit after recovery")
		}
	})

	t.Run("NameTaken", func(t *testing.T) {
		p := startInside(t, n, "exec sleep 600")
		m, opts := p.members()
		s, err := c.StartScope(ctx, "hf-kill.scope", m, opts)
		if err != nil {
			t.Fatal(err)
		}
		// A taken name is refused, and the scope that holds it is left
		// alone.
		q := startInside(t, n, "exec sleep 600")
		m, opts = q.members()
		if _, err := c.StartScope(ctx, s.Name, m, opts); !errors.Is(err, ErrUnitExists) {
			t.Fatalf("second scope named %s: want ErrUnitExists, got %v", s.Name, err)
		}
		if st, err := c.State(ctx, s.Name); err != nil || st.ActiveState != "active" {
			t.Fatalf("the first %s after the refused second: %+v %v", s.Name, st, err)
		}
		if _, err := c.StopUnit(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
	})
}
