package supervise

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// writeHelper writes an executable file at p with content and, when id is
// not empty, the trailer scripts/build.sh appends.
func writeHelper(t *testing.T, p, id string, mode os.FileMode) {
	t.Helper()
	b := []byte("\x7fELF not really a program, but the checks read only its metadata and trailer")
	if id != "" {
		b = append(b, helperTrailerTag+id+"\n"...)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func setHelperID(t *testing.T, id string) {
	old := helperID
	helperID = id
	t.Cleanup(func() { helperID = old })
}

const (
	idA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// An explicit HOSTFORK_HELPER is used only when it passes every check,
// and otherwise is an error that names the variable and the reason: a
// helper that another user could have written or replaced is never run.
func TestFindHelperNamed(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeHelper(t, good, idA, 0o755)
	bare := filepath.Join(dir, "bare")
	writeHelper(t, bare, "", 0o755)
	for _, tc := range []struct {
		name, path, id string
		prep           func(t *testing.T, p string)
		want           string // "" means used
	}{
		{name: "relative", path: "hostfork-helper", want: "absolute path"},
		{name: "missing", path: filepath.Join(dir, "none"), want: "no such file"},
		{name: "directory", path: dir, want: "not a regular file"},
		{name: "not executable", path: filepath.Join(dir, "plain"), prep: func(t *testing.T, p string) { writeHelper(t, p, idA, 0o644) }, want: "not executable"},
		{name: "group-writable", path: filepath.Join(dir, "gw"), prep: func(t *testing.T, p string) { writeHelper(t, p, idA, 0o775) }, want: "lets other users change it"},
		{name: "other user's", path: filepath.Join(dir, "theirs"), prep: func(t *testing.T, p string) {
			u := testutil.NewUser(t, "hfhelp", testutil.UserOptions{})
			writeHelper(t, p, idA, 0o755)
			if err := os.Chown(p, u.UID, u.GID); err != nil {
				t.Fatal(err)
			}
		}, want: "neither root nor this user"},
		{name: "noexec mount", path: filepath.Join(dir, "noexec", "hostfork-helper"), prep: func(t *testing.T, p string) {
			testutil.RequireRoot(t)
			mnt := filepath.Dir(p)
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOEXEC, "size=1m"); err != nil {
				t.Fatalf("mounting a noexec tmpfs: %v", err)
			}
			t.Cleanup(func() {
				if err := unix.Unmount(mnt, 0); err != nil {
					t.Errorf("cleanup: unmount %s: %v", mnt, err)
				}
			})
			writeHelper(t, p, idA, 0o755)
		}, want: "mounted noexec"},
		{name: "fifo", path: filepath.Join(dir, "fifo"), prep: func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, want: "not a regular file"},
		{name: "any build, no id linked", path: bare},
		{name: "same build", path: good, id: idA},
		{name: "another build", path: good, id: idB, want: "helper of another build"},
		{name: "no trailer, id linked", path: bare, id: idA, want: "no helper id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prep != nil {
				tc.prep(t, tc.path)
			}
			setHelperID(t, tc.id)
			t.Setenv(HelperEnv, tc.path)
			h, err := FindHelper()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("FindHelper: %v", err)
				}
				defer h.Close()
				if !h.Standalone || h.File == nil || h.Path != tc.path || h.Why != "" {
					t.Fatalf("FindHelper: %+v", h)
				}
				return
			}
			if err == nil {
				h.Close()
				t.Fatalf("FindHelper used %s; want an error with %q", tc.path, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), HelperEnv) {
				t.Fatalf("FindHelper: %v; want it to name %s and say %q", err, HelperEnv, tc.want)
			}
		})
	}
}

// Without HOSTFORK_HELPER, a build with a helper id uses the helper
// beside its executable when that is its own helper, and otherwise the
// running binary, saying why; a build without one always uses the
// running binary.
func TestFindHelperBeside(t *testing.T) {
	t.Setenv(HelperEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	beside := filepath.Join(filepath.Dir(exe), HelperName)
	if _, err := os.Lstat(beside); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s exists already (%v): not touching it", beside, err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	self := func(t *testing.T, h *Helper, why string) {
		t.Helper()
		if h.Standalone || h.File != nil || h.Path != "/proc/self/exe" || !strings.Contains(h.Why, why) {
			t.Fatalf("FindHelper: %+v; want the running binary because %q", h, why)
		}
	}

	setHelperID(t, "")
	writeHelper(t, beside, idA, 0o755)
	h, err := FindHelper()
	if err != nil {
		t.Fatal(err)
	}
	self(t, h, "no helper of its own")

	setHelperID(t, idA)
	h, err = FindHelper()
	if err != nil {
		t.Fatal(err)
	}
	if !h.Standalone || h.Path != beside || h.File == nil {
		t.Fatalf("FindHelper: %+v; want %s", h, beside)
	}
	h.Close()

	setHelperID(t, idB)
	h, err = FindHelper()
	if err != nil {
		t.Fatal(err)
	}
	self(t, h, "another build")

	writeHelper(t, beside, idB, 0o757)
	h, err = FindHelper()
	if err != nil {
		t.Fatal(err)
	}
	self(t, h, "lets other users change it")

	os.Remove(beside)
	h, err = FindHelper()
	if err != nil {
		t.Fatal(err)
	}
	self(t, h, "does not exist")
}

// The C helpers word an errno as Go does (hf_errstr.h), whichever C
// library they are linked with: the standalone helper links musl, whose
// strerror words several differently from glibc's.
func TestErrstrIsGos(t *testing.T) {
	for e := 1; e < 134; e++ {
		want := syscall.Errno(e).Error()
		if strings.HasPrefix(want, "errno ") {
			continue // no name on this architecture
		}
		if got := cErrstr(e); got != want {
			t.Errorf("errno %d: the helpers say %q, Go %q", e, got, want)
		}
	}
}

// The same with musl, which the standalone helper links: a program of
// hf_common.c alone prints hf_errstr for each errno.
func TestErrstrIsGosWithMusl(t *testing.T) {
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		testutil.Skip(t, "musl-gcc is not installed (Debian's musl-tools)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "errstr.c")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\n#include \"hf.h\"\nint main(void)\n{\n\tfor (int e = 1; e < 134; e++)\n\t\tprintf(\"%s\\n\", hf_errstr(e));\n\treturn 0;\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "errstr")
	if out, err := exec.Command("musl-gcc", "-static", "-O2", "-I.", "-o", prog, src, "hf_common.c").CombinedOutput(); err != nil {
		t.Fatalf("musl-gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(prog).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 133 {
		t.Fatalf("%d lines from the musl program", len(lines))
	}
	for e := 1; e < 134; e++ {
		want := syscall.Errno(e).Error()
		if strings.HasPrefix(want, "errno ") {
			continue
		}
		if got := lines[e-1]; got != want {
			t.Errorf("errno %d: the musl helpers say %q, Go %q", e, got, want)
		}
	}
}
