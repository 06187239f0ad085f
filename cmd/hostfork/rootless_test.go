package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// rootlessUser creates a throwaway user and a cgroup2 subtree delegated to
// it (chowned, as an administrator or systemd would), with a "session"
// group for the user's processes. Both are removed at cleanup.
func rootlessUser(t testing.TB) (name string, uid, gid int, session, delegated string) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("runuser"); err != nil {
		testutil.Skip(t, "runuser is not installed")
	}
	m, err := cgroup.FindMount()
	if err != nil {
		testutil.Skip(t, err.Error())
	}
	// Removed at cleanup with its home, after the delegated tree (below)
	// and what the user left in it are gone.
	u := testutil.NewUser(t, "hf", testutil.UserOptions{Home: true})
	name, uid, gid = u.Name, u.UID, u.GID
	delegated = filepath.Join(m.Path, testutil.UniqueName("hostfork-test-rootless"))
	if _, err := cgroup.Create(delegated); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.RemoveCgroupTree(t, delegated) })
	session = filepath.Join(delegated, "session")
	if _, err := cgroup.Create(session); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{delegated, session} {
		for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Chown(filepath.Join(p, f), uid, gid); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	return name, uid, gid, session, delegated
}

// hostforkForUser copies this test binary (which runs main when its argv[0]
// is "hostfork") where another user can execute it.
func hostforkForUser(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hostfork-rootless-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "hostfork")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	return bin
}

// asUser runs hostfork as user from inside the session cgroup: a root shell
// moves itself into the session group, then becomes the user.
func asUser(t testing.TB, name, session, bin string, args ...string) (string, int) {
	t.Helper()
	return asUserWith(t, "", nil, name, session, bin, args...)
}

// asUserWith is asUser with a root shell command run first (pre, "" none)
// and the shell started with attr (nil: as this process).
func asUserWith(t testing.TB, pre string, attr *syscall.SysProcAttr, name, session, bin string, args ...string) (string, int) {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := pre + "echo $$ > " + filepath.Join(session, "cgroup.procs") + " && exec runuser -u " + name + " -- env -u HOSTFORK_ROOT -u HOSTFORK_CGROUP_PARENT HOME=/home/" + name + " XDG_STATE_HOME= " + bin + " " + strings.Join(quoted, " ")
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// A non-root user with a delegated cgroup2 subtree gets the cgroup2 tier,
// owns its command tree (a setsid daemon included) and stops it; requests
// it can't do are refused cleanly, before anything is made.
func TestRootlessDelegatedSubtree(t *testing.T) {
	name, _, _, session, delegated := rootlessUser(t)
	bin := hostforkForUser(t)

	out, code := asUser(t, name, session, bin, "run", "--", "sh", "-c", "echo rootless; id -u")
	if code != 0 || !strings.Contains(out, "rootless") {
		t.Fatalf("run as %s: exit %d: %s", name, code, out)
	}
	out, code = asUser(t, name, session, bin, "run", "--detach", "--ttl", "2m", "--", "sh", "-c", "setsid sleep 300 & exec sleep 300")
	if code != 0 {
		t.Fatalf("detach: exit %d: %s", code, out)
	}
	env := strings.TrimSpace(out)
	out, code = asUser(t, name, session, bin, "status", "--json", env)
	if code != 0 {
		t.Fatalf("status: %d %s", code, out)
	}
	var st struct {
		Tier       string `json:"tier"`
		CgroupPath string `json:"cgroup_path"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v: %s", err, out)
	}
	if st.Tier != "cgroup2" || !strings.HasPrefix(st.CgroupPath, delegated+"/") {
		t.Fatalf("want the cgroup2 tier inside %s, got %s at %s", delegated, st.Tier, st.CgroupPath)
	}
	workload := cgroup.Open(st.CgroupPath)
	pids, _ := workload.AllProcs()
	if len(pids) < 3 { // guardian, sleep, setsid sleep
		t.Fatalf("tree not inside the delegated subtree: %v", pids)
	}
	out, code = asUser(t, name, session, bin, "stop", env)
	if code != 0 {
		t.Fatalf("stop as %s: exit %d: %s", name, code, out)
	}
	if workload.Exists() {
		if ev, err := workload.Events(); err == nil && ev.Populated {
			t.Fatalf("tree still populated after the user's stop")
		}
	}
	// What this user can't do is refused with the reason, nothing made.
	out, code = asUser(t, name, session, bin, "run", "--memory", "64M", "--", "true")
	if code != 121 || !strings.Contains(out, "memory limit") || strings.Contains(out, "accepted with --allow-weaker") {
		t.Fatalf("a limit the user can't enforce: want 121 with the reason, and no word of it being accepted: exit %d: %s", code, out)
	}
	out, code = asUser(t, name, session, bin, "ps", "--all", "--json")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
		t.Fatalf("ps after refusals should list only the 2 real runs: exit %d: %s", code, out)
	}
}
