package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

var (
	buildOnce sync.Once
	builtExe  string
	buildErr  error
)

// hostforkBinary builds cmd/hostfork and its companion cmd/hostfork-serve
// once per test binary into a world-readable temporary directory (another
// user runs it too) and returns the path of hostfork; TestMain removes the
// directory.
func hostforkBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "hostfork-cli-test-")
		if err != nil {
			buildErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		builtExe = filepath.Join(dir, "hostfork")
		cmd := exec.Command(goTool, "build", "-o", dir+"/", "github.com/habemus-papadum/hostfork/cmd/hostfork", "github.com/habemus-papadum/hostfork/cmd/hostfork-serve")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building hostfork: %v", buildErr)
	}
	return builtExe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtExe != "" {
		os.RemoveAll(filepath.Dir(builtExe))
	}
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// hostfork runs the built binary; prefix (e.g. setpriv ...) goes first.
func hostfork(t *testing.T, env []string, prefix []string, args ...string) result {
	t.Helper()
	argv := append(append(append([]string{}, prefix...), hostforkBinary(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDoctorJSON(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	r := hostfork(t, []string{"HOSTFORK_ROOT=" + root}, nil, "doctor", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		CanRun bool `json:"can_run"`
		Checks []struct {
			ID, Status, Evidence string
		} `json:"checks"`
		Facts struct {
			Store struct {
				Root string `json:"root"`
			} `json:"store"`
		} `json:"facts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if !rep.CanRun || len(rep.Checks) < 15 || rep.Facts.Store.Root != root {
		t.Errorf("%+v", rep)
	}
	if _, err := os.Stat(root); err == nil {
		t.Error("doctor without --spec created the store")
	}
}

// A non-root user asking for the cgroup2 tier without a delegated subtree:
// doctor exits 121 and names the remedy.
func TestDoctorRefusesCgroup2ForNonRoot(t *testing.T) {
	testutil.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv not found (util-linux)")
	}
	hostforkBinary(t)
	dir, err := os.MkdirTemp("", "hostfork-doctor-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const nobody = 65534
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(store, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	spec := writeFile(t, filepath.Join(dir, "spec.yaml"), "tier: cgroup2\n", 0o644)
	r := hostfork(t, []string{"HOSTFORK_ROOT=" + store, "HOSTFORK_CGROUP_PARENT=", "HOME=/nonexistent"},
		[]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, "doctor", "--spec", spec)
	if r.code != 121 {
		t.Fatalf("exit %d, want 121:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"cgroup.delegation", "HOSTFORK_CGROUP_PARENT=/sys/fs/cgroup/", "plan: the cgroup2 ownership tier was requested", "can't run here"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// A btrfs tree over a directory that is not a subvolume: the plan can't
// run, and doctor says how to prepare one.
func TestDoctorRefusesBtrfsTreeOverPlainDirectory(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil || sf.Type == unix.BTRFS_SUPER_MAGIC {
		t.Skip("the temporary directory is on btrfs; this test needs another filesystem")
	}
	src := filepath.Join(dir, "src")
	target := filepath.Join(dir, "target")
	for _, d := range []string{src, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := writeFile(t, filepath.Join(dir, "spec.yaml"),
		"trees:\n  p:\n    kind: btrfs\n    source: "+src+"\nview:\n  replace:\n    "+target+": p\n", 0o644)
	r := hostfork(t, []string{"HOSTFORK_ROOT=" + filepath.Join(dir, "store"), "HOSTFORK_CGROUP_PARENT=" + testutil.CgroupParent(t)}, nil,
		"doctor", "--spec", spec, "--json")
	if r.code != 121 {
		t.Fatalf("exit %d, want 121:\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		CanRun   bool     `json:"can_run"`
		Blockers []string `json:"blockers"`
		Needs    struct {
			Btrfs bool `json:"btrfs"`
			View  bool `json:"view"`
		} `json:"needs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.CanRun || !rep.Needs.Btrfs || !rep.Needs.View || len(rep.Blockers) == 0 || !strings.Contains(strings.Join(rep.Blockers, "\n"), "prepare a subvolume") {
		t.Errorf("%+v", rep)
	}
}

func fakeShell(t *testing.T, body string) string {
	return writeFile(t, filepath.Join(t.TempDir(), "login-shell"), "#!/bin/sh\n"+body, 0o755)
}

func envLines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// run --env-policy: Git redirections never pass unless given with --env;
// toolchain passes the login shell's PATH but not its secrets; a failed
// capture is a warning and leaves the environment as inherited.
func TestRunEnvPolicy(t *testing.T) {
	testutil.RequireRoot(t)
	base := []string{"HOSTFORK_ROOT=" + filepath.Join(t.TempDir(), "store"), "HOSTFORK_CGROUP_PARENT=" + testutil.CgroupParent(t),
		"GIT_DIR=/caller/.git", "GIT_CONFIG_COUNT=1", "HOSTFORK_TEST_CALLER=1"}
	good := "HOSTFORK_LOGIN_SHELL=" + fakeShell(t, "export SECRET_TOKEN=hunter2\nexport PATH=/custom/bin:$PATH\nshift; exec /bin/sh \"$@\"\n")

	r := hostfork(t, append(base, good), nil, "run", "--env-policy", "toolchain", "--", "env")
	vars := envLines(r.stdout)
	if r.code != 0 || !strings.HasPrefix(vars["PATH"], "/custom/bin:") || vars["SECRET_TOKEN"] != "" || vars["GIT_DIR"] != "" ||
		vars["GIT_CONFIG_COUNT"] != "" || vars["HOSTFORK_TEST_CALLER"] != "1" {
		t.Errorf("toolchain: exit %d, %v\n%s", r.code, vars, r.stderr)
	}

	r = hostfork(t, append(base, good), nil, "run", "--env", "GIT_DIR=/explicit/.git", "--", "env")
	if vars := envLines(r.stdout); r.code != 0 || vars["GIT_DIR"] != "/explicit/.git" || vars["PATH"] == "" || strings.HasPrefix(vars["PATH"], "/custom") {
		t.Errorf("inherit with explicit GIT_DIR: exit %d, %v", r.code, vars)
	}

	bad := "HOSTFORK_LOGIN_SHELL=" + fakeShell(t, "echo 'profile is broken' >&2\nexit 1\n")
	r = hostfork(t, append(base, bad), nil, "run", "--env-policy", "host-shell", "--", "env")
	vars = envLines(r.stdout)
	if r.code != 0 || !strings.Contains(r.stderr, "hostfork: warning: host-shell: capturing the login-shell environment failed") ||
		!strings.Contains(r.stderr, "profile is broken") || vars["HOSTFORK_TEST_CALLER"] != "1" || vars["GIT_DIR"] != "" {
		t.Errorf("failed capture: exit %d, stderr %q, %v", r.code, r.stderr, vars)
	}

	r = hostfork(t, base, nil, "run", "--env-policy", "sandbox", "--", "true")
	if r.code != 122 || !strings.Contains(r.stderr, "--env-policy") {
		t.Errorf("bad policy: exit %d %q", r.code, r.stderr)
	}
}
