package safefs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/safefs/safefstest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func open(t testing.TB, path string) *safefs.Dir {
	t.Helper()
	d, err := safefs.OpenDir(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return st
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// tempDir is t.TempDir resolved (it has no symbolic links here, but a
// host's TMPDIR might).
func tempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	return d
}

func TestOpenDirRefusesSymlinks(t *testing.T) {
	dir := tempDir(t)
	procRoot := "/proc/" + strconv.Itoa(os.Getpid()) + "/root" // a magic link
	must(t, os.MkdirAll(filepath.Join(dir, "real/sub"), 0o755))
	must(t, os.Symlink("real", filepath.Join(dir, "link")))
	must(t, os.Symlink(filepath.Join(dir, "real/sub"), filepath.Join(dir, "real/abs")))

	if d, err := safefs.OpenDir(filepath.Join(dir, "real/sub")); err != nil {
		t.Errorf("OpenDir of a real path: %v", err)
	} else {
		d.Close()
	}
	for _, c := range []struct{ path, names string }{
		{filepath.Join(dir, "link/sub"), filepath.Join(dir, "link")},
		{filepath.Join(dir, "link"), filepath.Join(dir, "link")},
		{filepath.Join(dir, "real/abs"), filepath.Join(dir, "real/abs")},
		{procRoot + dir, procRoot},
	} {
		_, err := safefs.OpenDir(c.path)
		if !errors.Is(err, safefs.ErrSymlink) {
			t.Errorf("OpenDir(%s): %v, want ErrSymlink", c.path, err)
			continue
		}
		if !strings.Contains(err.Error(), c.names+" is") {
			t.Errorf("OpenDir(%s): %q does not name %s", c.path, err, c.names)
		}
	}
	if _, err := safefs.OpenDir("relative/path"); err == nil {
		t.Errorf("OpenDir of a relative path: no error")
	}
	if _, err := safefs.OpenDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenDir of a missing directory: %v", err)
	}
	// OpenDirFollowing resolves the way there, not the last component.
	if d, err := safefs.OpenDirFollowing(filepath.Join(dir, "link/sub")); err != nil {
		t.Errorf("OpenDirFollowing through a link: %v", err)
	} else {
		d.Close()
	}
	if _, err := safefs.OpenDirFollowing(filepath.Join(dir, "link")); !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("OpenDirFollowing of a link: %v, want ErrSymlink", err)
	}
}

func TestDirNamesStayBeneath(t *testing.T) {
	dir := tempDir(t)
	must(t, os.MkdirAll(filepath.Join(dir, "top/a/b"), 0o755))
	must(t, os.Symlink("/", filepath.Join(dir, "top/a/root")))
	must(t, os.Symlink("../..", filepath.Join(dir, "top/a/up")))
	must(t, os.WriteFile(filepath.Join(dir, "outside"), []byte("x"), 0o644))
	top := open(t, filepath.Join(dir, "top"))

	if d, err := top.OpenDir("a/b"); err != nil {
		t.Errorf("OpenDir(a/b): %v", err)
	} else {
		if d.Path() != filepath.Join(dir, "top/a/b") {
			t.Errorf("Path %s", d.Path())
		}
		d.Close()
	}
	for _, name := range []string{"..", "../top", "a/../../top", "/etc", ""} {
		if _, err := top.OpenDir(name); !errors.Is(err, unix.EINVAL) {
			t.Errorf("OpenDir(%q): %v, want EINVAL", name, err)
		}
	}
	for _, name := range []string{"a/root", "a/root/etc", "a/up", "a/up/outside"} {
		if _, err := top.OpenDir(name); !errors.Is(err, safefs.ErrSymlink) {
			t.Errorf("OpenDir(%q): %v, want ErrSymlink", name, err)
		}
		if _, err := top.OpenFile(name, os.O_RDONLY, 0); !errors.Is(err, safefs.ErrSymlink) {
			t.Errorf("OpenFile(%q): %v, want ErrSymlink", name, err)
		}
	}
	// An exclusive create at a dangling link neither follows it nor
	// replaces it.
	must(t, os.Symlink(filepath.Join(dir, "made-through-link"), filepath.Join(dir, "top/dangling")))
	if _, err := top.CreateExclusive("dangling", 0o600); !errors.Is(err, safefs.ErrExists) || !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateExclusive over a dangling link: %v, want ErrExists", err)
	}
	if _, err := top.MkdirExclusive("dangling", 0o700); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("MkdirExclusive over a dangling link: %v, want ErrExists", err)
	}
	if exists(filepath.Join(dir, "made-through-link")) {
		t.Errorf("a create followed the link")
	}
	for _, name := range []string{"a/b", "..", ".", "x\x00y"} {
		if _, err := top.MkdirExclusive(name, 0o700); !errors.Is(err, unix.EINVAL) {
			t.Errorf("MkdirExclusive(%q): %v, want EINVAL (one component only)", name, err)
		}
	}
}

func TestExclusiveCreationIgnoresUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dir := tempDir(t)
	d := open(t, dir)

	sub, err := d.MkdirExclusive("sub", os.ModeSetgid|0o751)
	must(t, err)
	defer sub.Close()
	st := lstat(t, filepath.Join(dir, "sub"))
	if st.Mode != unix.S_IFDIR|unix.S_ISGID|0o751 || int(st.Uid) != os.Geteuid() {
		t.Errorf("MkdirExclusive: mode %o uid %d", st.Mode, st.Uid)
	}
	if !sub.ID().Same(safefs.FileID{Dev: st.Dev, Ino: st.Ino}) {
		t.Errorf("ID %v, lstat %d/%d", sub.ID(), st.Dev, st.Ino)
	}
	if _, err := d.MkdirExclusive("sub", 0o700); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("second MkdirExclusive: %v, want ErrExists", err)
	}

	f, err := sub.CreateExclusive("f", 0o640)
	must(t, err)
	_, err = f.WriteString("data")
	must(t, err)
	must(t, f.Close())
	if st := lstat(t, filepath.Join(dir, "sub/f")); st.Mode != unix.S_IFREG|0o640 {
		t.Errorf("CreateExclusive: mode %o", st.Mode)
	}
	if _, err := sub.CreateExclusive("f", 0o600); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("second CreateExclusive: %v, want ErrExists", err)
	}

	must(t, d.Rename("sub", d, "moved"))
	must(t, os.Mkdir(filepath.Join(dir, "taken"), 0o700))
	if err := d.Rename("moved", d, "taken"); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("Rename over an existing name: %v, want ErrExists", err)
	}
	if !exists(filepath.Join(dir, "moved/f")) {
		t.Errorf("a refused rename moved something")
	}
}

func TestLchmodNeverFollows(t *testing.T) {
	dir := tempDir(t)
	target := filepath.Join(dir, "target")
	must(t, os.WriteFile(target, nil, 0o600))
	must(t, os.Symlink(target, filepath.Join(dir, "link")))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	d := open(t, dir)
	if err := d.Lchmod("link", 0o777); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("Lchmod of a symbolic link: %v, want EOPNOTSUPP", err)
	}
	if st := lstat(t, target); st.Mode&0o7777 != 0o600 {
		t.Errorf("Lchmod followed the link: target mode %o", st.Mode)
	}
	must(t, d.Lchmod("fifo", os.ModeSticky|0o640))
	if st := lstat(t, filepath.Join(dir, "fifo")); st.Mode != unix.S_IFIFO|unix.S_ISVTX|0o640 {
		t.Errorf("Lchmod of a fifo: mode %o", st.Mode)
	}
}

func TestEnsurePrivateDir(t *testing.T) {
	testutil.RequireRoot(t)
	u := safefstest.NewUser(t)
	dir := safefstest.SharedDir(t, "")
	d := open(t, dir)
	protected := safefstest.Protected(t)
	before := safefstest.Snapshot(t, protected)

	// Absent: created with exactly perm; present and private: reopened.
	p, err := d.EnsurePrivateDir("pool", 0o700)
	must(t, err)
	p.Close()
	if st := lstat(t, filepath.Join(dir, "pool")); st.Mode != unix.S_IFDIR|0o700 || st.Uid != 0 {
		t.Errorf("new private directory: mode %o uid %d", st.Mode, st.Uid)
	}
	again, err := d.EnsurePrivateDir("pool", 0o700)
	must(t, err)
	if !again.ID().Same(p.ID()) {
		t.Errorf("EnsurePrivateDir reopened %v, made %v", again.ID(), p.ID())
	}
	again.Close()
	if _, err := d.EnsurePrivateDir("open", 0o777); !errors.Is(err, unix.EINVAL) {
		t.Errorf("EnsurePrivateDir with mode 0777: %v, want EINVAL", err)
	}

	refused := []struct {
		name, setup string
		want        error
		says        string
	}{
		{"link", "ln -s " + protected + " link", safefs.ErrSymlink, "remove it"},
		{"theirs", "mkdir theirs && chmod 700 theirs", safefs.ErrUntrusted, "owned by uid"},
		{"group-writable", "", safefs.ErrUntrusted, "writable by its group"},
		{"world-writable", "", safefs.ErrUntrusted, "chmod go-w"},
		{"file", "", nil, ""},
	}
	// The other user makes its entries in a directory it owns; root's
	// entries are made by root.
	shared := filepath.Join(dir, "shared")
	must(t, os.Mkdir(shared, 0o755))
	must(t, os.Chown(shared, u.UID, u.GID))
	for _, c := range refused {
		switch c.name {
		case "group-writable":
			must(t, os.Mkdir(filepath.Join(shared, c.name), 0o770))
			must(t, os.Chmod(filepath.Join(shared, c.name), 0o770))
		case "world-writable":
			must(t, os.Mkdir(filepath.Join(shared, c.name), 0o777))
			must(t, os.Chmod(filepath.Join(shared, c.name), 0o777))
		case "file":
			must(t, os.WriteFile(filepath.Join(shared, c.name), nil, 0o600))
		default:
			u.Run(t, "cd "+shared+" && "+c.setup)
		}
	}
	sd := open(t, shared)
	for _, c := range refused {
		got, err := sd.EnsurePrivateDir(c.name, 0o700)
		if err == nil {
			got.Close()
			t.Errorf("EnsurePrivateDir(%s): accepted", c.name)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("EnsurePrivateDir(%s): %v, want %v", c.name, err, c.want)
		}
		if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), filepath.Join(shared, c.name)) {
			t.Errorf("EnsurePrivateDir(%s): %q should name the path and say %q", c.name, err, c.says)
		}
	}
	if after := safefstest.Snapshot(t, protected); after != before {
		t.Errorf("the protected directory changed:\n%s\nnow\n%s", before, after)
	}
}
