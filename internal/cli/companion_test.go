package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// companionDir puts copies of the test's hostfork binary and of its
// companion in a new directory of the test (only hostfork with
// companion=false) and returns the directory.
func companionDir(t *testing.T, companion bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"hostfork"}
	if companion {
		names = append(names, "hostfork-serve")
	}
	for _, n := range names {
		if err := copyFile(filepath.Join(filepath.Dir(hostforkBinary(t)), n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runBin runs bin with args, PATH limited to the system directories (no
// companion there), and returns stdout, stderr and the exit code.
func runBin(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir(), "HOSTFORK_ROOT=" + filepath.Join(t.TempDir(), "store")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// TestCompanionMissing: serve and mcp without the companion beside hostfork
// or on PATH exit 121 and name the build that fixes it.
func TestCompanionMissing(t *testing.T) {
	bin := filepath.Join(companionDir(t, false), "hostfork")
	for _, verb := range []string{"serve", "mcp"} {
		r := runBin(t, bin, nil, verb)
		want := "go build -o " + filepath.Dir(bin) + "/ ./cmd/hostfork-serve"
		if r.code != 121 || !strings.Contains(r.stderr, "companion binary hostfork-serve") || !strings.Contains(r.stderr, want) {
			t.Errorf("hostfork %s without the companion: exit %d, stderr %q (want 121 and %q)", verb, r.code, r.stderr, want)
		}
	}
	// The flags are still hostfork's own: a bad one is a usage error.
	if r := runBin(t, bin, nil, "serve", "--no-such-flag"); r.code != 122 {
		t.Errorf("serve --no-such-flag: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCompanionRuns: beside hostfork, the companion runs the verb in the
// same process (its own checks of the flags), hostfork prints the verb's
// help itself, and a companion of another build runs with a warning.
func TestCompanionRuns(t *testing.T) {
	dir := companionDir(t, true)
	bin := filepath.Join(dir, "hostfork")
	r := runBin(t, bin, nil, "serve", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "serve answers hostfork's HTTP API") || !strings.Contains(r.stdout, "--metrics-listen") {
		t.Fatalf("serve --help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A check only the server's code makes: the companion ran it.
	r = runBin(t, bin, nil, "serve", "--metrics-listen", "0.0.0.0:9464")
	if r.code != 122 || !strings.Contains(r.stderr, "only a loopback address") {
		t.Fatalf("serve --metrics-listen 0.0.0.0 through the companion: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("companion of the same build warned: %q", r.stderr)
	}
	// Same process: exec, not a child (a socket unit's LISTEN_PID must
	// still match). The shell's $$ is hostfork's PID; the companion
	// prints its own in the error of an inherited socket it can't use.
	// (Were it another process, it would ignore the variables and serve
	// until the context ends.)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=2 exec "$0" serve`, bin)
	sh.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOSTFORK_ROOT=" + filepath.Join(t.TempDir(), "store")}
	out, _ := sh.CombinedOutput()
	if !strings.Contains(string(out), "systemd passed 2 sockets (LISTEN_FDS)") {
		t.Errorf("serve with LISTEN_PID of the hostfork process: the companion did not take the passed socket as its own (not the same process?): %s", out)
	}
	// Run directly by a hostfork of another build: a warning, then the
	// verb.
	r = runBin(t, filepath.Join(dir, "hostfork-serve"), []string{"HOSTFORK_CALLER_BUILD=v0.0.1 commit abc dirty false go1.0"}, "serve", "--help")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: hostfork-serve was built from") || !strings.Contains(r.stderr, "v0.0.1 commit abc") {
		t.Errorf("companion of another build: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCompanionUntrusted: a companion another user could have written or
// replaced is refused (121), not run and not skipped for one on PATH.
func TestCompanionUntrusted(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name string
		fix  func(path string) error
		want string
	}{
		{"group-writable", func(p string) error { return os.Chmod(p, 0o775) }, "lets other users change it"},
		{"world-writable", func(p string) error { return os.Chmod(p, 0o757) }, "lets other users change it"},
		{"another owner", func(p string) error { return os.Chown(p, 65534, 65534) }, "owned by uid 65534"},
		{"not executable", func(p string) error { return os.Chmod(p, 0o644) }, "not executable"},
		{"a directory", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := companionDir(t, true)
			if err := tc.fix(filepath.Join(dir, "hostfork-serve")); err != nil {
				t.Fatal(err)
			}
			r := runBin(t, filepath.Join(dir, "hostfork"), nil, "serve", "--metrics-listen", "0.0.0.0:9464")
			if r.code != 121 || !strings.Contains(r.stderr, "refusing to run") || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q (want 121 and %q)", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
}
