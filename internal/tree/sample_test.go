package tree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func TestKBField(t *testing.T) {
	b := []byte("Rss:  100 kB\nPss:    40 kB\nPss_Anon: 7 kB\n")
	if n, ok := kBField(b, "Pss:"); !ok || n != 40*1024 {
		t.Errorf("Pss: %d %v", n, ok)
	}
	if _, ok := kBField([]byte("Name: x\n"), "VmRSS:"); ok {
		t.Error("missing field found")
	}
}

// A PID tree's members are its roots, once each and first, then what
// descendantsOf finds; a dead root or none leaves nothing to observe.
func TestWithDescendants(t *testing.T) {
	self := os.Getpid()
	got, err := withDescendants([]int{self, self})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0] != self {
		t.Fatalf("got %v, want %d first", got, self)
	}
	for _, p := range got[1:] {
		if p == self {
			t.Errorf("root listed twice: %v", got)
		}
	}
	for _, roots := range [][]int{{1 << 30}, {self, 1 << 30}, {0}, nil} {
		if m, err := withDescendants(roots); err == nil {
			t.Errorf("roots %v gave a tree: %v", roots, m)
		}
	}
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// startTree starts sh with two sleeping children and waits until both
// run sleep; cleanup kills the process group (by the leader's PID).
func startTree(t testing.TB, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 3600 & sleep 3600 & wait")
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if kids := descendantsOf([]int{cmd.Process.Pid}); len(kids) == 2 && comm(kids[0]) == "sleep" && comm(kids[1]) == "sleep" {
			// Both children have exec'd; give the loader a moment so the
			// tree is idle and its memory stable.
			time.Sleep(20 * time.Millisecond)
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatal("tree never had two children")
		}
	}
}

func TestSamplePIDTree(t *testing.T) {
	cmd := startTree(t, nil)
	for _, s := range []Sampler{{}, {PSS: true}} {
		got, err := s.Sample(context.Background(), []SampleTarget{{PIDs: []int{cmd.Process.Pid}}, {PIDs: []int{1 << 30}}, {}})
		if err != nil {
			t.Fatal(err)
		}
		tree, dead, none := got[0], got[1], got[2]
		t.Logf("tree: %+v", tree)
		if !tree.Complete || !tree.Stable || tree.Members != 3 || tree.Bytes == 0 {
			t.Errorf("idle 3-process tree: %+v", tree)
		}
		if want := map[bool]string{true: "pss", false: "rss"}[s.PSS]; tree.Source != want {
			t.Errorf("source %q, want %q", tree.Source, want)
		}
		if dead.Complete || dead.Stable || dead.Note == "" {
			t.Errorf("dead root: %+v", dead)
		}
		if none.Complete || none.Stable || none.Note == "" {
			t.Errorf("neither cgroup nor roots: %+v", none)
		}
	}
}

func TestSampleCgroupCounter(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "memory.usage_in_bytes"), []byte("123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "memory.current"), []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Sampler{}.Sample(context.Background(), []SampleTarget{{Cgroup: dir}, {Cgroup: bad}, {Cgroup: filepath.Join(dir, "gone")}})
	if err != nil {
		t.Fatal(err)
	}
	if g := got[0]; g.Bytes != 123456789 || !g.Complete || !g.Stable || g.Source != "memory.usage_in_bytes" {
		t.Errorf("v1 counter: %+v", g)
	}
	for _, g := range got[1:] {
		if g.Complete || g.Stable || g.Note == "" {
			t.Errorf("unreadable group sampled as complete: %+v", g)
		}
	}
}

// On a cgroup2 group without the memory controller (this hybrid host's
// unified hierarchy), the sample is the sum over the group's members.
func TestSampleCgroupMembers(t *testing.T) {
	parent := testutil.CgroupParent(t)
	g, err := cgroup.Create(filepath.Join(parent, "w"))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	startTree(t, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})
	got, err := Sampler{}.Sample(context.Background(), []SampleTarget{{Cgroup: parent}})
	if err != nil {
		t.Fatal(err)
	}
	s := got[0]
	t.Logf("cgroup %s: %+v", parent, s)
	if !s.Complete || !s.Stable || s.Bytes == 0 {
		t.Errorf("sample %+v", s)
	}
	if !strings.HasPrefix(s.Source, "memory.") && s.Members != 3 {
		t.Errorf("members %d, want 3", s.Members)
	}
}

func TestSampleHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (Sampler{Gap: time.Hour}).Sample(ctx, []SampleTarget{{PIDs: []int{os.Getpid()}}}); err == nil {
		t.Fatal("cancelled sample returned no error")
	}
}
