// Package safefstest makes the adversary of safefs's and storage's tests:
// a real unprivileged local user, created for one test and deleted when it
// ends, and the test binary re-executed as that user (setpriv) to run a
// named attack while the test does its work. Only _test.go files import
// it.
//
// A test package that starts attacks registers them in TestMain:
//
//	func TestMain(m *testing.M) {
//		safefstest.Main(map[string]safefstest.Attack{"swap": swap})
//		os.Exit(m.Run())
//	}
package safefstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// User is a local user made for one test (testutil.NewUser).
type User struct {
	*testutil.User

	binOnce sync.Once
	bin     string
	binErr  error
}

// NewUser creates a user with no home and no login shell and deletes it
// when the test ends, also when it fails (testutil.NewUser). It skips,
// failing under HOSTFORK_TEST_STRICT=1, when not root or when useradd,
// userdel or setpriv are missing.
func NewUser(t testing.TB) *User {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		testutil.Skip(t, "setpriv not found (it comes with util-linux)")
	}
	return &User{User: testutil.NewUser(t, "hft", testutil.UserOptions{})}
}

// Command returns cmd with args run as u: setpriv --reuid --regid
// --clear-groups.
func (u *User) Command(name string, args ...string) *exec.Cmd {
	a := append([]string{"--reuid=" + u.Name, "--regid=" + u.Name, "--clear-groups", "--", name}, args...)
	return exec.Command("setpriv", a...)
}

// Run runs the shell script as u and returns its output; a failure fails
// the test.
func (u *User) Run(t testing.TB, script string) string {
	t.Helper()
	out, err := u.Command("/bin/sh", "-ec", script).CombinedOutput()
	if err != nil {
		t.Fatalf("as %s: sh -ec %q: %v\n%s", u.Name, script, err, out)
	}
	return string(out)
}

// Attack is an attack the re-executed test binary runs as the other user
// until stop is closed. It returns a summary for the test's log.
type Attack func(stop <-chan struct{}, args []string) string

const (
	modeEnv = "HOSTFORK_SAFEFSTEST_ATTACK"
	argsEnv = "HOSTFORK_SAFEFSTEST_ARGS"
)

// Main runs the attack the test binary was re-executed for, and returns
// when it wasn't. Call it first in TestMain.
func Main(attacks map[string]Attack) {
	mode := os.Getenv(modeEnv)
	if mode == "" {
		return
	}
	fn, ok := attacks[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "safefstest: no attack %q\n", mode)
		os.Exit(2)
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(argsEnv)), &args); err != nil {
		fmt.Fprintln(os.Stderr, "safefstest:", err)
		os.Exit(2)
	}
	stop := make(chan struct{})
	go func() {
		// The test closes our stdin to stop us.
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	fmt.Println("ready")
	fmt.Println(fn(stop, args))
	os.Exit(0)
}

// Running is an attack in progress.
type Running struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
	done   bool
}

// Start re-executes the test binary as u to run the attack registered as
// mode with args, and returns once it runs. Stop ends it; the test's
// cleanup ends it too (by closing its stdin, then by its PID).
func (u *User) Start(t testing.TB, mode string, args ...string) *Running {
	t.Helper()
	bin := u.binary(t)
	raw, _ := json.Marshal(args)
	cmd := u.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), modeEnv+"="+mode, argsEnv+"="+string(raw))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &Running{cmd: cmd}
	cmd.Stderr = &r.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin, r.out = stdin, bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting attack %s as %s: %v", mode, u.Name, err)
	}
	t.Cleanup(func() {
		if !r.done {
			r.stdin.Close()
			_ = r.cmd.Process.Kill() // by PID: it is our child
			_ = r.cmd.Wait()
		}
	})
	line, err := r.out.ReadString('\n')
	if line != "ready\n" {
		r.stdin.Close()
		_ = r.cmd.Wait()
		r.done = true
		t.Fatalf("attack %s as %s did not start: %q %v\n%s", mode, u.Name, line, err, r.stderr.String())
	}
	return r
}

// Stop ends the attack and returns its summary.
func (r *Running) Stop(t testing.TB) string {
	t.Helper()
	r.stdin.Close()
	rest, _ := io.ReadAll(r.out)
	err := r.cmd.Wait()
	r.done = true
	if err != nil {
		t.Errorf("attack: %v\n%s", err, r.stderr.String())
	}
	return strings.TrimSpace(string(rest))
}

// binary copies the test binary where u can run it, once per user.
func (u *User) binary(t testing.TB) string {
	t.Helper()
	u.binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hostfork-safefstest-bin-")
		if err != nil {
			u.binErr = err
			return
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			u.binErr = err
			return
		}
		self, err := os.Executable()
		if err != nil {
			u.binErr = err
			return
		}
		u.bin = filepath.Join(dir, filepath.Base(self))
		u.binErr = copyFile(self, u.bin)
	})
	if u.binErr != nil {
		t.Fatalf("making the test binary runnable by %s: %v", u.Name, u.binErr)
	}
	return u.bin
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Protected makes a directory only root can reach (mode 0700, inside
// /root when it exists) holding one file, and removes it when the test
// ends. Attacks point their symbolic links at it.
func Protected(t testing.TB) string {
	t.Helper()
	base := "/root"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = ""
	}
	dir := tempDir(t, base, "hostfork-protected-", 0o700)
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Snapshot describes a directory for "was it touched": its own mode and
// owner, and every entry below it with its mode, owner, size and mtime.
func Snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d %d %d\n", p, fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", dir, err)
	}
	return b.String()
}

// SharedDir makes a directory that u can reach (its ancestors are
// searchable): base/<random>, mode 0755, owned by root, removed at
// cleanup. base is "" for os.TempDir.
func SharedDir(t testing.TB, base string) string {
	t.Helper()
	return tempDir(t, base, "hostfork-shared-", 0o755)
}

// tempDir makes base/<prefix><random> with mode, owned by root, removed
// at cleanup.
func tempDir(t testing.TB, base, prefix string, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}
