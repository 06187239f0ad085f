package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// GuardianMode is the hidden argv[1] that selects the guardian.
const GuardianMode = "__hostfork_guardian"

// guardian is the state of the running guardian process.
type guardian struct {
	cfg     Config
	events  *os.File
	receipt *os.File

	mu        sync.Mutex
	rec       Receipt
	recLen    int
	leaderPID int
	stopping  string // reason of the first stop, once requested
}

// GuardianMain is the guardian's entry point; it returns the process exit
// status. It is called before any CLI setup, and does no heavy work before
// the launcher releases it.
func GuardianMain() int {
	// The guardian is mostly asleep; keep its heap small.
	debug.SetGCPercent(20)
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	g := &guardian{
		events:  os.NewFile(fdEvents, "events"),
		receipt: os.NewFile(fdReceipt, "receipt"),
	}
	ctl := os.NewFile(fdControl, "control")
	// Become a subreaper before anything can be orphaned to us.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "hostfork guardian: PR_SET_CHILD_SUBREAPER: %v\n", err)
		return 125
	}
	r := bufio.NewReader(ctl)
	// The gate: nothing runs until the launcher has durably registered our
	// identity and sends the release. EOF here is an aborted launch.
	line, err := r.ReadBytes('\n')
	if err != nil {
		return 0
	}
	var msg controlMsg
	if err := json.Unmarshal(line, &msg); err != nil || msg.Op != "release" || msg.Config == nil {
		fmt.Fprintf(os.Stderr, "hostfork guardian: bad release message\n")
		return 125
	}
	g.cfg = *msg.Config
	g.initReceipt()
	return g.run(r)
}

func (g *guardian) initReceipt() {
	boot, _ := linux.BootID()
	var st unix.Stat_t
	_ = unix.Fstat(int(g.receipt.Fd()), &st)
	g.rec = Receipt{
		CommandID: g.cfg.CommandID,
		EnvID:     g.cfg.EnvID,
		BootID:    boot,
		Guardian:  os.Getpid(),
		ProofDev:  st.Dev,
		ProofIno:  st.Ino,
	}
}

// writeReceipt rewrites the receipt in place. The file keeps its identity
// (device+inode recorded at registration); the text is padded so that it
// never shrinks, and fsynced.
func (g *guardian) writeReceipt() {
	b, _ := json.Marshal(&g.rec)
	b = append(b, '\n')
	for len(b) < g.recLen {
		b = append(b, ' ')
	}
	g.recLen = len(b)
	if _, err := g.receipt.WriteAt(b, 0); err == nil {
		_ = g.receipt.Sync()
	}
}

func (g *guardian) emit(ev Event) {
	ev.At = time.Now().UTC()
	// A dead launcher gives EPIPE; the receipt is the durable channel.
	_, _ = g.events.Write(marshalLine(ev))
}

func (g *guardian) run(ctl *bufio.Reader) int {
	stdin := os.NewFile(fdStdin, "stdin")
	stdout := os.NewFile(fdStdout, "stdout")
	stderr := os.NewFile(fdStderr, "stderr")
	files := []*os.File{stdin, stdout, stderr}
	var tees sync.WaitGroup
	if g.cfg.Output == OutputPipe {
		// Tee: the workload writes into pipes that the guardian copies to the
		// artifact files and forwards to the launcher. Losing the launcher
		// loses only the forward copy, never the artifact.
		outR, outW, err1 := os.Pipe()
		errR, errW, err2 := os.Pipe()
		if err1 != nil || err2 != nil {
			return g.startFailed(fmt.Errorf("creating output pipes: %v %v", err1, err2), 125)
		}
		files[1], files[2] = outW, errW
		tees.Add(2)
		go func() { defer tees.Done(); tee(outR, stdout, os.NewFile(fdFwdOut, "fwd-out")) }()
		go func() { defer tees.Done(); tee(errR, stderr, os.NewFile(fdFwdErr, "fwd-err")) }()
		defer func() { outW.Close(); errW.Close() }()
	}
	pid, err := g.startWorkload(files)
	if g.cfg.Output == OutputPipe {
		files[1].Close()
		files[2].Close()
	}
	stdin.Close()
	if err != nil {
		code := 125
		if errors.Is(err, unix.ENOENT) {
			code = 127
		} else if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOEXEC) || errors.Is(err, unix.EISDIR) {
			code = 126
		}
		return g.startFailed(err, code)
	}
	if g.cfg.Output != OutputPipe {
		stdout.Close()
		stderr.Close()
	}
	wid, _ := linux.IdentityOf(pid)
	g.mu.Lock()
	g.leaderPID = pid
	g.rec.WorkloadPID = pid
	g.rec.WorkloadStart = wid.StartTime
	g.writeReceipt()
	g.mu.Unlock()
	g.emit(Event{Kind: "started", PID: pid, StartTime: wid.StartTime})

	go g.watchControl(ctl)
	if g.cfg.DeadlineMono > 0 {
		go g.watchDeadline()
	}
	g.reapAll(pid)
	tees.Wait()
	now := time.Now().UTC()
	g.mu.Lock()
	g.rec.TreeExited = &now
	g.rec.Complete = true
	g.rec.StopReason = g.stopping
	g.writeReceipt()
	g.mu.Unlock()
	g.emit(Event{Kind: "tree", Reason: g.stopping})
	return 0
}

func (g *guardian) startFailed(err error, code int) int {
	now := time.Now().UTC()
	g.mu.Lock()
	g.rec.StartError = err.Error()
	g.rec.ExitCode = &code
	g.rec.LeaderExited = &now
	g.rec.TreeExited = &now
	g.rec.Complete = true
	g.writeReceipt()
	g.mu.Unlock()
	g.emit(Event{Kind: "exec-failed", Error: err.Error(), ExitCode: &code})
	return 0
}

func (g *guardian) startWorkload(files []*os.File) (int, error) {
	attr := &syscall.ProcAttr{
		Dir:   g.cfg.Cwd,
		Env:   g.cfg.Env,
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	if g.cfg.Foreground {
		attr.Sys.Foreground = true
		attr.Sys.Ctty = 0
	}
	if g.cfg.WorkloadCgroup != "" {
		fd, err := unix.Open(g.cfg.WorkloadCgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("opening workload cgroup: %w", err)
		}
		defer unix.Close(fd)
		attr.Sys.UseCgroupFD = true
		attr.Sys.CgroupFD = fd
	}
	if g.cfg.ViewPID > 0 {
		// Namespaces are per thread: join the view on a locked thread that
		// is never returned to the scheduler, and fork from it.
		runtime.LockOSThread()
		if err := joinMountNamespace(g.cfg.ViewPID); err != nil {
			return 0, err
		}
	}
	pid, err := syscall.ForkExec(g.cfg.Path, g.cfg.Argv, attr)
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", g.cfg.Path, err)
	}
	return pid, nil
}

func joinMountNamespace(pid int) error {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the view's mount namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("joining the view: %w", err)
	}
	return nil
}

// reapAll waits for every child, adopted orphans included, until the
// kernel reports none remain (ECHILD). The leader's status is recorded the
// moment it is reaped.
func (g *guardian) reapAll(leader int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.ECHILD {
			return
		}
		if err != nil {
			// Unexpected; keep trying rather than leave children unreaped.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if pid == leader {
			g.leaderExited(ws)
		}
	}
}

func (g *guardian) leaderExited(ws syscall.WaitStatus) {
	now := time.Now().UTC()
	ev := Event{Kind: "leader"}
	g.mu.Lock()
	g.rec.LeaderExited = &now
	if ws.Signaled() {
		s := int(ws.Signal())
		g.rec.Signal = &s
		ev.Signal = &s
	} else {
		c := ws.ExitStatus()
		g.rec.ExitCode = &c
		ev.ExitCode = &c
	}
	g.leaderPID = 0
	g.writeReceipt()
	g.mu.Unlock()
	g.emit(ev)
}

func (g *guardian) watchControl(r *bufio.Reader) {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// The owner is gone (the launcher exited or was killed).
			if g.cfg.OwnerExit == OwnerExitStop {
				g.stopTree(ReasonOwnerExit, g.cfg.Grace)
			}
			return
		}
		var msg controlMsg
		if json.Unmarshal(line, &msg) != nil {
			continue
		}
		switch msg.Op {
		case "signal":
			g.mu.Lock()
			if g.leaderPID > 0 {
				_ = syscall.Kill(g.leaderPID, syscall.Signal(msg.Signal))
			}
			g.mu.Unlock()
		case "stop":
			go g.stopTree(msg.Reason, g.cfg.Grace)
		}
	}
}

func (g *guardian) watchDeadline() {
	soft := g.cfg.DeadlineMono - g.cfg.Grace
	if d := soft - linux.MonotonicNow(); d > 0 {
		time.Sleep(d)
	}
	g.stopTree(ReasonDeadline, g.cfg.DeadlineMono-linux.MonotonicNow())
}

// stopTree ends the workload tree: SIGTERM to every member, up to grace,
// then SIGKILL (cgroup.kill in the cgroup2 tier). The first reason wins.
func (g *guardian) stopTree(reason string, grace time.Duration) {
	g.mu.Lock()
	if g.stopping == "" {
		g.stopping = reason
	}
	g.mu.Unlock()
	g.signalTree(syscall.SIGTERM)
	end := time.Now().Add(grace)
	for time.Now().Before(end) {
		if g.treeEmpty() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.killTree()
}

func (g *guardian) treeEmpty() bool {
	if g.cfg.WorkloadCgroup != "" {
		b, err := os.ReadFile(g.cfg.WorkloadCgroup + "/cgroup.events")
		return err != nil || strings.Contains(string(b), "populated 0")
	}
	return len(descendants(os.Getpid())) == 0
}

func (g *guardian) members() []int {
	if g.cfg.WorkloadCgroup != "" {
		b, err := os.ReadFile(g.cfg.WorkloadCgroup + "/cgroup.procs")
		if err != nil {
			return nil
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return pids
	}
	return descendants(os.Getpid())
}

// signalTree signals each member through a pidfd opened while the PID was
// still a member, so a PID reused after exit is never signalled.
func (g *guardian) signalTree(sig syscall.Signal) {
	for _, pid := range g.members() {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if g.stillMember(pid) {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

func (g *guardian) stillMember(pid int) bool {
	if g.cfg.WorkloadCgroup == "" {
		return isDescendant(pid, os.Getpid())
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "0::") && strings.HasSuffix(g.cfg.WorkloadCgroup, strings.TrimSpace(line[3:])) {
			return true
		}
	}
	return false
}

func (g *guardian) killTree() {
	if g.cfg.WorkloadCgroup != "" {
		if f, err := os.OpenFile(g.cfg.WorkloadCgroup+"/cgroup.kill", os.O_WRONLY, 0); err == nil {
			_, _ = f.WriteString("1")
			f.Close()
			return
		}
	}
	// Subreaper tier: repeat until no descendant remains, since a member
	// may fork between listing and killing.
	for i := 0; i < 100; i++ {
		pids := descendants(os.Getpid())
		if len(pids) == 0 {
			return
		}
		g.signalTree(syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
}

// descendants lists the live descendants of root by walking /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := linux.ReadStat(pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		parent[pid] = st.PPID
	}
	var out []int
	for pid := range parent {
		for p, n := parent[pid], 0; p > 1 && n < 4096; p, n = parent[p], n+1 {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func isDescendant(pid, root int) bool {
	for n := 0; n < 4096 && pid > 1; n++ {
		st, err := linux.ReadStat(pid)
		if err != nil {
			return false
		}
		if st.PPID == root {
			return true
		}
		pid = st.PPID
	}
	return false
}

// tee copies src to the artifact file and, while it accepts data, to fwd.
func tee(src *os.File, file *os.File, fwd *os.File) {
	defer src.Close()
	defer file.Close()
	buf := make([]byte, 64<<10)
	fwdOK := fwd != nil
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, _ = file.Write(buf[:n])
			if fwdOK {
				if _, werr := fwd.Write(buf[:n]); werr != nil {
					fwdOK = false
					fwd.Close()
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				_, _ = fmt.Fprintf(file, "\n[hostfork: capture error: %v]\n", err)
			}
			break
		}
	}
	if fwdOK {
		fwd.Close()
	}
}
