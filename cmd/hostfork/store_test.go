package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A store root this user can't write to is refused with 123 and one line
// that names the fix, whether it exists or would have to be created, and
// nothing is created in it. The test runs hostfork as nobody.
func TestStoreRootNotWritable(t *testing.T) {
	testutil.RequireRoot(t)
	uid, gid := uint32(65534), uint32(65534)
	if u, err := user.Lookup("nobody"); err == nil {
		if n, err := strconv.Atoi(u.Uid); err == nil {
			uid = uint32(n)
		}
		if n, err := strconv.Atoi(u.Gid); err == nil {
			gid = uint32(n)
		}
	}
	// nobody must be able to reach and run the binary: a copy in a
	// directory open to all, which the test removes.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostfork")
	if err := copyExecutable(exe, bin); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root") // root's, mode 0755
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(env []string, args ...string) cliResult {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, env...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		r := cliResult{}
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			r.code = ee.ExitCode()
		}
		r.stdout, r.stderr = out.String(), errb.String()
		return r
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"existing root, --root", nil, []string{"--root", root, "run", "--", "true"}, "is not writable by this user; choose another with --root or HOSTFORK_ROOT"},
		{"existing root, HOSTFORK_ROOT", []string{"HOSTFORK_ROOT=" + root}, []string{"run", "--detach", "--ttl", "1m", "--", "sleep", "300"}, "is not writable by this user; choose another with --root or HOSTFORK_ROOT"},
		{"existing root, ps", nil, []string{"--root", root, "ps"}, "is not writable by this user; choose another with --root or HOSTFORK_ROOT"},
		{"root to create", nil, []string{"--root", filepath.Join(root, "store"), "run", "--", "true"}, "choose a writable one with --root or HOSTFORK_ROOT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := asNobody(tc.env, tc.args...)
			if r.code != 123 {
				t.Fatalf("want exit 123: %v", r)
			}
			if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "hostfork: ") || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("want one line naming the fix (%q): %v", tc.want, r)
			}
			ents, err := os.ReadDir(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) > 0 {
				t.Fatalf("the refused root has content: %s", ents[0].Name())
			}
		})
	}
}

func copyExecutable(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
