package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// With the store's filesystem full, stop and the deadline still kill, and
// a new launch refuses before anything is released, with the remedy.
func TestStoreFilesystemFull(t *testing.T) {
	testutil.RequireRoot(t)
	parent := testutil.CgroupParent(t)
	bin := hostforkForUser(t)
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=8m"); err != nil {
		testutil.Skip(t, "can't mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	store := filepath.Join(root, "store")
	hf := func(args ...string) (string, int) {
		c := exec.Command(bin, append([]string{"--root", store}, args...)...)
		c.Env = append(os.Environ(), "HOSTFORK_CGROUP_PARENT="+parent)
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	pidOf := func(env string) linux.Identity {
		t.Helper()
		st, code := hf("status", env)
		if code != 0 {
			t.Fatalf("status: %s", st)
		}
		for _, line := range strings.Split(st, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "leader pid:"); ok {
				pid, _ := strconv.Atoi(strings.TrimSpace(v))
				id, err := linux.IdentityOf(pid)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
		}
		t.Fatalf("no leader pid in status:\n%s", st)
		return linux.Identity{}
	}
	stopEnv, code := hf("run", "--detach", "--ttl", "10m", "--", "sleep", "300")
	if code != 0 {
		t.Fatalf("run: %s", stopEnv)
	}
	stopEnv = strings.TrimSpace(stopEnv)
	deadlineEnv, code := hf("run", "--detach", "--ttl", "4s", "--grace", "1s", "--", "sh", "-c", "trap '' TERM; sleep 300")
	if code != 0 {
		t.Fatalf("run: %s", deadlineEnv)
	}
	deadlineEnv = strings.TrimSpace(deadlineEnv)
	a, b := pidOf(stopEnv), pidOf(deadlineEnv)

	// Fill the filesystem.
	f, err := os.Create(filepath.Join(root, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()

	out, code := hf("run", "--", "true")
	if code != 123 || !strings.Contains(out, "full") || !strings.Contains(out, "free space") {
		t.Fatalf("a launch on a full store: exit %d: %s", code, out)
	}
	hf("stop", stopEnv) // may fail to record; it must still kill
	for end := time.Now().Add(10 * time.Second); linux.Assess(a) == linux.Alive; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("stop on a full store did not kill %v", a)
		}
	}
	for end := time.Now().Add(20 * time.Second); linux.Assess(b) == linux.Alive; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the deadline on a full store did not kill %v", b)
		}
	}
	// With space again, the records catch up.
	os.Remove(filepath.Join(root, "filler"))
	if out, code := hf("reap"); code != 0 {
		t.Fatalf("reap: %s", out)
	}
	out, _ = hf("ps", "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("ps after space came back: %s", out)
	}
	// The stopped environment never reads active, nor stopped by a
	// deadline it did not reach (issue 39, item 6): the user's stop when
	// it was kept, else "unknown".
	st, _ := hf("status", "--json", stopEnv)
	if !strings.Contains(st, `"state": "stopped"`) || !(strings.Contains(st, `"stop_reason": "user"`) || strings.Contains(st, `"stop_reason": "unknown"`)) {
		t.Errorf("the environment stopped on a full store, after reap: want stopped by user or unknown:\n%s", st)
	}
}
