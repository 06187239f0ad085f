package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// rootlessViewUser is rootlessUser with the subordinate ids a rootless
// view maps (newuidmap/newgidmap, /etc/subuid and /etc/subgid) and a
// source tree in the user's home, owned by the user, with a file of
// root's beside it.
func rootlessViewUser(t testing.TB) (name string, uid int, session, src string) {
	t.Helper()
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" is not installed (apt-get install uidmap)")
		}
	}
	name, uid, gid, session, _ := rootlessUser(t)
	if r, _ := linux.SubIDs("/etc/subuid", name, uid); len(r) == 0 {
		testutil.Skip(t, "useradd gave "+name+" no subordinate uids in /etc/subuid (SUB_UID_COUNT in /etc/login.defs)")
	}
	src = filepath.Join("/home", name, "src")
	for _, d := range []string{src, filepath.Join(src, "d")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, body := range map[string]string{"f": "base\n", "d/old": "old\n", "rootfile": "root's\n"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{src, filepath.Join(src, "d"), filepath.Join(src, "f"), filepath.Join(src, "d/old")} {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return name, uid, session, src
}

// noProcessesOf waits (bounded) until user name has no process left.
func noProcessesOf(t testing.TB, uid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			if st, err := os.Stat("/proc/" + e.Name()); err == nil && int(st.Sys().(*syscall.Stat_t).Uid) == uid {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of uid %d left after stop: %v", uid, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real unprivileged user (with subordinate ids and a delegated cgroup2
// subtree) creates an environment whose overlay tree replaces a directory
// in its view, runs a command there, exports the tree and stops it: the
// view is a user namespace of its own, the user is itself inside, root's
// files show as nobody, and the host's directory is untouched.
func TestRootlessView(t *testing.T) {
	name, uid, session, src := rootlessViewUser(t)
	bin := hostforkForUser(t)
	as := func(args ...string) (string, int) { return asUser(t, name, session, bin, args...) }
	if err := os.Chown(filepath.Join(src, "rootfile"), 0, 0); err != nil {
		t.Fatal(err)
	}
	tree := []string{"--tree", "t=overlay:" + src, "--replace", src + "=t"}

	out, code := as(append([]string{"plan"}, tree...)...)
	if code != 0 || !strings.Contains(out, "view tier: user-namespace") || !strings.Contains(out, "show as nobody") || !strings.Contains(out, "subordinate uids") {
		t.Fatalf("plan as %s: exit %d: %s", name, code, out)
	}
	out, code = as(append([]string{"create", "--ttl", "5m"}, tree...)...)
	if code != 0 {
		t.Fatalf("create as %s: exit %d: %s", name, code, out)
	}
	env := strings.TrimSpace(out)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			as("stop", env)
		}
	})
	script := `set -e; cat /proc/self/uid_map | wc -l; id -u; stat -c %U "$1/rootfile"; cat "$1/f"
echo changed > "$1/f"; rm -rf "$1/d"; mkdir "$1/d"; echo new > "$1/d/new"`
	out, code = as("exec", env, "--", "sh", "-c", script, "sh", src)
	if code != 0 {
		t.Fatalf("exec in the rootless view: exit %d: %s", code, out)
	}
	lines := strings.Fields(out)
	if len(lines) != 4 || lines[1] != strconv.Itoa(uid) || lines[2] != "nobody" || lines[3] != "base" {
		t.Fatalf("inside the view: want [uid_map lines, %d, nobody, base], got %q", uid, lines)
	}
	if n, _ := strconv.Atoi(lines[0]); n < 2 {
		t.Fatalf("uid_map has %d line(s): the subordinate ids were not mapped (newuidmap)", n)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "f")); string(b) != "base\n" {
		t.Fatalf("the host's %s/f changed: %q", src, b)
	}
	if _, err := os.Stat(filepath.Join(src, "d/old")); err != nil {
		t.Fatalf("the host's d/old: %v", err)
	}

	// Files in and out go through the rootless keeper's view too.
	got := filepath.Join("/home", name, "got")
	if out, code := as("cp", env+":"+src+"/d/new", got); code != 0 {
		t.Fatalf("cp out of the rootless view: exit %d: %s", code, out)
	}
	if b, _ := os.ReadFile(got); string(b) != "new\n" {
		t.Fatalf("cp out: %q", b)
	}
	if out, code := as("cp", got, env+":"+src+"/in"); code != 0 {
		t.Fatalf("cp into the rootless view: exit %d: %s", code, out)
	}
	if out, code := as("ls", env, src); code != 0 || !strings.Contains(out, "in") || !strings.Contains(out, "rootfile") {
		t.Fatalf("ls in the rootless view: exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(src, "in")); !os.IsNotExist(err) {
		t.Fatalf("cp into the view reached the host's %s: %v", src, err)
	}

	dest := filepath.Join("/home", name, "out")
	out, code = as("export", env, "t", "--to", dest)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "f")); string(b) != "changed\n" {
		t.Fatalf("exported f: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "d/new")); string(b) != "new\n" {
		t.Fatalf("exported d/new: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dest, "d/old")); !os.IsNotExist(err) {
		t.Fatalf("exported d/old should be gone (the directory was replaced): %v", err)
	}

	out, code = as("stop", env)
	stopped = true
	if code != 0 {
		t.Fatalf("stop: exit %d: %s", code, out)
	}
	noProcessesOf(t, uid)
	// The user removes its own tree: overlayfs left work/work with mode
	// 000, which only root could open as it was.
	out, code = as("gc", "--retain-trees", "0s")
	if code != 0 || !strings.Contains(out, "deleted "+env+" tree t") {
		t.Fatalf("gc of the rootless overlay tree: exit %d: %s", code, out)
	}
}

// Copy and btrfs trees without root: a copy of the user's directory, and
// a snapshot of a subvolume the user made on a btrfs mounted with
// user_subvol_rm_allowed (so that the user may also delete it at gc).
func TestRootlessViewCopyAndBtrfs(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "user_subvol_rm_allowed")
	name, uid, session, src := rootlessViewUser(t)
	bin := hostforkForUser(t)
	as := func(args ...string) (string, int) { return asUser(t, name, session, bin, args...) }
	// The loop mount's temporary directory is root's alone: let the user
	// reach a directory of its own on it.
	if err := os.Chmod(filepath.Dir(mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(mnt, name)
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, uid, uid); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(mine, "base")
	if out, err := exec.Command("runuser", "-u", name, "--", "sh", "-c", `btrfs subvolume create "$1" >/dev/null && echo base > "$1/f"`, "sh", base).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create as %s: %v: %s", name, err, out)
	}
	target := filepath.Join("/home", name, "b")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := as("run", "--tree", "c=copy:"+src, "--replace", src+"=c", "--tree", "b=btrfs:"+base, "--replace", target+"=b",
		"--", "sh", "-ec", `echo c > "$1/f"; echo b > "$2/f"; cat "$1/f" "$2/f"`, "sh", src, target)
	if code != 0 || strings.Fields(out)[0] != "c" || strings.Fields(out)[1] != "b" {
		t.Fatalf("run with copy and btrfs trees as %s: exit %d: %s", name, code, out)
	}
	for f, want := range map[string]string{filepath.Join(src, "f"): "base\n", filepath.Join(base, "f"): "base\n"} {
		if b, _ := os.ReadFile(f); string(b) != want {
			t.Fatalf("the host's %s changed: %q", f, b)
		}
	}
	noProcessesOf(t, uid)
	out, code = as("gc", "--retain-trees", "0s")
	if code != 0 || strings.Count(out, "deleted ") != 2 {
		t.Fatalf("gc of the rootless copy and btrfs trees: exit %d: %s", code, out)
	}
}

// With unprivileged user namespaces turned off, a view without root is
// refused before anything is made, with the setting and the remedy.
//
// The setting is turned off for this test alone: user.max_user_namespaces
// is per user namespace and binds every namespace below, so the test's
// root shell enters a user namespace of its own that maps every id to
// itself (it stays root, with CAP_SYS_RESOURCE there, which root lacks on
// some hosts for the host's own setting), writes 0 there, and becomes
// the user. The host's setting is never changed, and the setting goes
// with the namespace when the shell ends, also when the test fails.
func TestRootlessViewUsernsOff(t *testing.T) {
	name, uid, session, src := rootlessViewUser(t)
	bin := hostforkForUser(t)
	all := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: all, GidMappings: all, GidMappingsEnableSetgroups: true}
	const off = "echo 0 > /proc/sys/user/max_user_namespaces && test \"$(cat /proc/sys/user/max_user_namespaces)\" = 0 && "
	out, code := asUserWith(t, off, attr, name, session, bin, "run", "--tree", "t=overlay:"+src, "--replace", src+"=t", "--", "true")
	if code != 121 || !strings.Contains(out, "user.max_user_namespaces is 0") || !strings.Contains(out, "sysctl -w user.max_user_namespaces=") {
		t.Fatalf("a view with user namespaces off: want exit 121 naming the sysctl and its remedy, got %d: %s", code, out)
	}
	out, code = asUserWith(t, off, attr, name, session, bin, "create", "--ttl", "1m", "--tree", "t=overlay:"+src, "--replace", src+"=t")
	if code != 121 || !strings.Contains(out, "user.max_user_namespaces is 0") {
		t.Fatalf("create with user namespaces off: exit %d: %s", code, out)
	}
	out, code = asUser(t, name, session, bin, "ps", "--all", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("nothing may be made: ps: exit %d: %s", code, out)
	}
	noProcessesOf(t, uid)
}

// BenchmarkViewCreateExecStop compares an environment with an overlay tree
// in its view, created, used by one exec and stopped through the CLI, as
// root and as an unprivileged user (a user namespace; the target
// is at most 1.5× root's). Each iteration is three CLI processes, started
// the same way for both (setpriv, cloned into the user's session cgroup,
// no PAM); the time is per iteration, side by side. HF_BENCH_STEPS=1 logs
// each step.
func BenchmarkViewCreateExecStop(b *testing.B) {
	name, _, session, src := rootlessViewUser(b)
	bin := hostforkForUser(b)
	cg, err := os.Open(session)
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	rootStore := b.TempDir()
	cli := func(user string, env []string) func(args ...string) (string, int) {
		return func(args ...string) (string, int) {
			cmd := exec.Command("setpriv", append([]string{"--reuid=" + user, "--regid=" + user, "--clear-groups", "--", bin}, args...)...)
			cmd.Env = env
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				b.Fatal(err)
			}
			return string(out), code
		}
	}
	tree := []string{"--tree", "t=overlay:" + src, "--replace", src + "=t"}
	for _, c := range []struct {
		name  string
		run   func(args ...string) (string, int)
		extra []string
	}{
		// The target is in the user's home: root must accept it.
		{"root", cli("root", []string{"PATH=" + os.Getenv("PATH"), "HOME=/root", "HOSTFORK_ROOT=" + rootStore}), []string{"--allow-untrusted-targets"}},
		{"rootless", cli(name, []string{"PATH=" + os.Getenv("PATH"), "HOME=/home/" + name}), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				t0 := time.Now()
				out, code := c.run(append(append([]string{"create", "--ttl", "5m"}, tree...), c.extra...)...)
				t1 := time.Now()
				if code != 0 {
					b.Fatalf("create: %d %s", code, out)
				}
				env := strings.TrimSpace(out)
				if out, code := c.run("exec", env, "--", "cat", src+"/f"); code != 0 || out != "base\n" {
					b.Fatalf("exec: %d %q", code, out)
				}
				t2 := time.Now()
				if out, code := c.run("stop", env); code != 0 {
					b.Fatalf("stop: %d %s", code, out)
				}
				if os.Getenv("HF_BENCH_STEPS") != "" {
					b.Logf("create %v exec %v stop %v", t1.Sub(t0), t2.Sub(t1), time.Since(t2))
				}
			}
		})
	}
}
