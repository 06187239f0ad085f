package tree

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// subreaperShell is the environment variable that makes the test binary
// a shell that is its descendants' subreaper, as a guardian is: it sets
// the attribute, which execve keeps, and becomes sh with its arguments.
const subreaperShell = "HOSTFORK_TREE_TEST_SUBREAPER_SH"

func TestMain(m *testing.M) {
	if os.Getenv(subreaperShell) == "1" {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
			os.Exit(125)
		}
		sh, err := exec.LookPath("sh")
		if err == nil {
			err = syscall.Exec(sh, append([]string{"sh"}, os.Args[1:]...), os.Environ())
		}
		fmt.Fprintln(os.Stderr, "exec sh:", err)
		os.Exit(125)
	}
	os.Exit(m.Run())
}

// start runs a shell script in group (cloned into it) and returns it with
// the PIDs it prints, one per line, before the line "ready".
func start(t *testing.T, group, script string) (*exec.Cmd, []int) {
	t.Helper()
	return startShell(t, group, exec.Command("sh", "-c", script))
}

// startSubreaper is start with a shell that is its descendants'
// subreaper.
func startSubreaper(t *testing.T, group, script string) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-c", script)
	cmd.Env = append(os.Environ(), subreaperShell+"=1")
	return startShell(t, group, cmd)
}

func startShell(t *testing.T, group string, cmd *exec.Cmd) (*exec.Cmd, []int) {
	t.Helper()
	fd, err := cgroup.Open(group).OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "ready" {
			return cmd, pids
		}
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("script said %q", sc.Text())
		}
		pids = append(pids, n)
	}
	t.Fatalf("script ended before ready: %v", sc.Err())
	return nil, nil
}

func gone(pid int, start uint64) bool {
	boot, _ := linux.BootID()
	return linux.Assess(linux.Identity{BootID: boot, PID: pid, StartTime: start}) != linux.Alive
}

func identity(t *testing.T, pid int) linux.Identity {
	t.Helper()
	id, err := linux.IdentityOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A member that traps SIGTERM in a nested cgroup gets SIGTERM first (it
// records it), then is killed after the grace; nothing is left frozen.
func TestStopNestedGetsTERMThenKill(t *testing.T) {
	parent := testutil.CgroupParent(t)
	wl := filepath.Join(parent, "workload")
	if _, err := cgroup.Create(wl); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "term")
	m, _ := cgroup.FindMount()
	script := `mkdir ` + wl + `/nested && sh -c 'echo $$ > ` + wl + `/nested/cgroup.procs; trap "echo got > ` + mark + `" TERM; echo $$; echo ready; while :; do sleep 0.05; done' & wait`
	_, pids := start(t, wl, script)
	victim := identity(t, pids[0])
	res, err := Stop(context.Background(), Target{Cgroup: wl, Mount: m.Path}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(mark); strings.TrimSpace(string(b)) != "got" {
		t.Fatalf("nested member did not get SIGTERM first (mark %q)", b)
	}
	if !gone(victim.PID, victim.StartTime) {
		t.Fatal("nested member survived")
	}
	// Every member is inside the cgroup: cgroup.kill alone ends them, with
	// nothing to freeze.
	if res.Froze || !res.Stable || res.Signalled == 0 || res.Killed == 0 {
		t.Fatalf("result %+v", res)
	}
	if ev, err := cgroup.Open(wl).Events(); err == nil && ev.Frozen {
		t.Fatal("the group was left frozen")
	}
}

// A descendant of a root that moved itself out of the cgroup is still a
// member and is stopped; a process outside both is never signalled. With a
// root that is not a subreaper the tree is listed before the kill, since
// the kill would orphan the descendant to init; with a subreaper root (a
// guardian) the kill comes first and the orphan is found under the root.
func TestStopEscapedDescendant(t *testing.T) {
	for _, tc := range []struct {
		name      string
		subreaper bool
		start     func(*testing.T, string, string) (*exec.Cmd, []int)
	}{
		{"root", false, start},
		{"subreaper-root", true, startSubreaper},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := testutil.CgroupParent(t)
			wl := filepath.Join(parent, "workload")
			other := filepath.Join(parent, "other")
			gd := filepath.Join(parent, "guardian")
			for _, g := range []string{wl, other, gd} {
				if _, err := cgroup.Create(g); err != nil {
					t.Fatal(err)
				}
			}
			m, _ := cgroup.FindMount()
			// The root shell (like a guardian) is outside the workload
			// group; its child joins the workload group and stays, and a
			// grandchild moves to "other" (outside the target) and keeps
			// running.
			// The grandchild's pid comes through a file the root waits
			// for (a positive signal, not a sleep).
			f := filepath.Join(t.TempDir(), "pid")
			root, pids := tc.start(t, gd, `sh -c 'echo $$ > `+wl+`/cgroup.procs; sh -c "echo \$\$ > `+other+`/cgroup.procs; echo \$\$ > `+f+`.tmp; mv `+f+`.tmp `+f+`; exec sleep 1000" & exec sleep 1000' & while [ ! -e `+f+` ]; do sleep 0.01; done; cat `+f+`; echo ready; wait; exec sleep 1000`)
			escaped := identity(t, pids[0])
			bystander, _ := start(t, other, `echo ready; exec sleep 1000`)
			by := identity(t, bystander.Process.Pid)
			target := Target{Cgroup: wl, Mount: m.Path, Roots: []linux.Identity{identity(t, root.Process.Pid)}, Subreapers: tc.subreaper}
			got, _ := Members(target)
			found := false
			for _, p := range got {
				if p == escaped.PID {
					found = true
				}
				if p == by.PID || p == root.Process.Pid {
					t.Fatalf("members %v include pid %d", got, p)
				}
			}
			if !found {
				t.Fatalf("members %v lack the escaped descendant %d", got, escaped.PID)
			}
			res, err := Stop(context.Background(), target, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !gone(escaped.PID, escaped.StartTime) || res.Outsiders != 1 || res.Killed == 0 {
				t.Fatalf("escaped member: gone=%v result %+v", gone(escaped.PID, escaped.StartTime), res)
			}
			if left, _ := cgroup.Open(wl).AllProcs(); len(left) > 0 {
				t.Fatalf("the workload group still holds %v", left)
			}
			if gone(by.PID, by.StartTime) {
				t.Fatal("a process outside the tree was killed")
			}
			if gone(root.Process.Pid, target.Roots[0].StartTime) {
				t.Fatal("the root was killed")
			}
		})
	}
}

// In the subreaper tier (no cgroup), the root's descendants are the tree.
func TestStopDescendantsOnly(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root, pids := start(t, parent, `sleep 1000 & echo $!; sh -c 'sleep 1000 & echo $!; wait' & sleep 0.1; echo ready; wait; exec sleep 1000`)
	ids := []linux.Identity{identity(t, pids[0]), identity(t, pids[1])}
	target := Target{Roots: []linux.Identity{identity(t, root.Process.Pid)}}
	if _, err := Stop(context.Background(), target, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !gone(id.PID, id.StartTime) {
			t.Fatalf("pid %d survived", id.PID)
		}
	}
	if gone(root.Process.Pid, target.Roots[0].StartTime) {
		t.Fatal("the root was killed")
	}
}

// A fork loop can't outrun the quiesced kill.
func TestStopForkLoop(t *testing.T) {
	parent := testutil.CgroupParent(t)
	wl := filepath.Join(parent, "workload")
	if _, err := cgroup.Create(wl); err != nil {
		t.Fatal(err)
	}
	m, _ := cgroup.FindMount()
	start(t, wl, `echo ready; while :; do sleep 5 & done`)
	time.Sleep(200 * time.Millisecond)
	if _, err := Stop(context.Background(), Target{Cgroup: wl, Mount: m.Path}, 0); err != nil {
		t.Fatal(err)
	}
	if ev, _ := cgroup.Open(wl).Events(); ev.Populated {
		t.Fatal("group still populated")
	}
}

// An empty tree is a no-op.
func TestStopEmpty(t *testing.T) {
	parent := testutil.CgroupParent(t)
	m, _ := cgroup.FindMount()
	res, err := Stop(context.Background(), Target{Cgroup: parent, Mount: m.Path}, time.Second)
	if err != nil || res.Signalled != 0 || res.Froze {
		t.Fatalf("%+v %v", res, err)
	}
}

// helperEnv makes the test binary a forker from several threads.
const helperEnv = "HOSTFORK_TREE_TEST_FORKER"

// TestForkerHelper is not a test: run as a child with helperEnv set, it
// starts sleeps from goroutines locked to their own threads (so the
// children belong to threads other than the main one), prints their PIDs,
// makes the file helperEnv names, and waits to be killed.
func TestForkerHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("a helper process, not a test")
	}
	pids := make(chan int)
	for i := 0; i < 4; i++ {
		go func() {
			runtime.LockOSThread() // this thread stays ours: the child's parent thread
			c := exec.Command("sleep", "1000")
			if err := c.Start(); err != nil {
				pids <- -1
				return
			}
			pids <- c.Process.Pid
			_ = c.Wait()
		}()
	}
	for i := 0; i < 4; i++ {
		fmt.Println(<-pids)
	}
	if err := os.WriteFile(os.Getenv(helperEnv), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Hour)
}

// The children files (followed down from the roots) and the walk of all
// of /proc find the same descendants: children of other threads than the
// main one, grandchildren, and no zombies.
func TestDescendantsAgree(t *testing.T) {
	if !haveChildrenFiles() {
		testutil.Skip(t, "this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): the /proc walk that replaces them runs here, and the stop tests cover it")
	}
	parent := testutil.CgroupParent(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The shell (the root) runs the threaded forker, a sleep whose own
	// child is an unreaped zombie, and a grandchild under a subshell. It
	// says ready once each of them has said it is done: the forker made
	// its mark after printing its children, the subshell after printing
	// its sleep, and the zombie's parent wrote the zombie's PID.
	dir := t.TempDir()
	mark, sub, zombie := filepath.Join(dir, "forked"), filepath.Join(dir, "sub"), filepath.Join(dir, "zombie")
	script := fmt.Sprintf(`%s=%s %q -test.run '^TestForkerHelper$' & sh -c 'sleep 0 & echo $! >%s; exec sleep 1000' & sh -c 'sleep 1000 & echo $!; : >%s; wait' & while [ ! -e %s ] || [ ! -e %s ] || [ ! -s %s ]; do sleep 0.01; done; echo ready; wait`,
		helperEnv, mark, self, zombie, sub, mark, sub, zombie)
	root, pids := start(t, parent, script)
	if len(pids) != 5 || slices.Contains(pids, -1) {
		t.Fatalf("the tree printed %v", pids)
	}
	// Wait for the zombie to be one: its sleep 0 has exited. (Its shell
	// runs no foreground command, so nothing reaps it.)
	b, err := os.ReadFile(zombie)
	if err != nil {
		t.Fatal(err)
	}
	z, err := strconv.Atoi(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		t.Fatalf("zombie PID %q: %v", b, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := linux.ReadStat(z)
		if err != nil {
			t.Fatalf("the sleep 0 %d was reaped, the zombie case is not covered: %v", z, err)
		}
		if st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sleep 0 %d has not exited after 10 s (%+v)", z, st)
		}
	}
	// The tree is still now: read it both ways.
	roots := []int{root.Process.Pid}
	bfs := descendantsOf(roots)
	walk := walkDescendants(roots)
	slices.Sort(bfs)
	slices.Sort(walk)
	if !slices.Equal(bfs, walk) {
		t.Fatalf("children files found %v, the /proc walk %v", bfs, walk)
	}
	for _, p := range pids {
		if !slices.Contains(bfs, p) {
			t.Fatalf("descendants %v lack %d (printed %v)", bfs, p, pids)
		}
	}
	// The case this covers: some of the forker's children belong to
	// threads other than its main one.
	parents := map[int]int{}
	forker := 0
	for _, p := range pids {
		if pst, err := linux.ReadStat(p); err == nil {
			if parents[pst.PPID]++; parents[pst.PPID] == 4 {
				forker = pst.PPID
			}
		}
	}
	mainKids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", forker, forker))
	onOthers := 0
	for _, p := range pids {
		if pst, _ := linux.ReadStat(p); pst.PPID == forker && !slices.Contains(strings.Fields(string(mainKids)), strconv.Itoa(p)) {
			onOthers++
		}
	}
	if forker == 0 || onOthers == 0 {
		t.Fatalf("every child of the forker %d is its main thread's (%q): the threaded case is not covered", forker, mainKids)
	}
	for _, p := range bfs {
		if st, err := linux.ReadStat(p); err != nil || st.State == 'Z' {
			t.Fatalf("descendant %d is not alive (%+v, %v)", p, st, err)
		}
	}
	// 1 forker + 4 sleeps, 1 sleep (with its zombie left out), 1 subshell
	// + 1 sleep.
	if len(bfs) != 8 {
		for _, p := range bfs {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			t.Logf("%d %q", p, b)
		}
		t.Fatalf("descendants %v: want 8", bfs)
	}
}

// A process whose main thread has exited (stat says Z) while another
// thread runs is alive and a member, and so is the child that thread
// forked, through the children files and through the /proc walk.
func TestZombieLeaderWithThreadsIsAMember(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testutil.Skip(t, "python3 is needed to end a main thread with pthread_exit")
	}
	parent := testutil.CgroupParent(t)
	py := `import ctypes, os, subprocess, threading, time
def run():
    c = subprocess.Popen(["sleep", "1000"])
    print(os.getpid(), flush=True)
    print(c.pid, flush=True)
    time.sleep(1000)
threading.Thread(target=run).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)`
	root, pids := start(t, parent, `python3 -c '`+py+`' & while :; do sleep 0.01; [ "$(cut -d' ' -f3 /proc/$!/stat 2>/dev/null)" = Z ] && break; done; echo ready; wait`)
	if len(pids) != 2 {
		t.Fatalf("the script printed %v", pids)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	leader, child := pids[0], pids[1]
	st, err := linux.ReadStat(leader)
	if err != nil || st.State != 'Z' || st.Threads < 2 {
		t.Fatalf("the leader's stat: %+v, %v; want Z with live threads", st, err)
	}
	roots := []int{root.Process.Pid}
	for name, list := range map[string]func([]int) []int{"children files": descendantsOf, "walk": walkDescendants} {
		if name == "children files" && !haveChildrenFiles() {
			continue
		}
		got := list(roots)
		if !slices.Contains(got, leader) || !slices.Contains(got, child) {
			t.Errorf("%s: descendants %v lack the zombie-led process %d or its child %d", name, got, leader, child)
		}
	}
	target := Target{Roots: []linux.Identity{identity(t, root.Process.Pid)}}
	if _, err := Stop(context.Background(), target, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if st, err := linux.ReadStat(p); err == nil && (st.State != 'Z' || st.Threads > 1) {
			t.Errorf("pid %d survived the stop (%+v)", p, st)
		}
	}
}

// A tree larger than one walk along the children files is listed by the
// walk of /proc instead, whole.
func TestDescendantsBeyondTheCap(t *testing.T) {
	if !haveChildrenFiles() {
		testutil.Skip(t, "this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): the /proc walk that replaces them runs here, and the stop tests cover it")
	}
	parent := testutil.CgroupParent(t)
	root, _ := start(t, parent, `for i in $(seq 10); do sleep 1000 & done; sleep 0.1; echo ready; wait`)
	t.Cleanup(func() {
		m, _ := cgroup.FindMount()
		_, _ = Kill(context.Background(), Target{Cgroup: parent, Mount: m.Path})
	})
	defer func(n int) { maxDescendants = n }(maxDescendants)
	maxDescendants = 4
	got := descendantsOf([]int{root.Process.Pid})
	if len(got) != 10 {
		t.Fatalf("descendants %v: want the 10 sleeps", got)
	}
}
