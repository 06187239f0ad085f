package storagetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"golang.org/x/sys/unix"
)

// RichNames are the entries FillRich makes below dir/meta, in the order
// their times are set (leaves first).
var RichNames = []string{
	"meta/suid", "meta/private", "meta/fifo", "meta/sock", "meta/null", "meta/hard1",
	"meta/sub/hard2", "meta/link", "meta/dangling", "meta/setgid/f", "meta/locked/f",
	"meta/sub", "meta/setgid", "meta/sticky", "meta/locked", "meta",
}

// FillRich adds, as root, entries whose metadata a tree must keep: setuid,
// setgid and sticky modes, other owners (on files, directories and
// symbolic links), a fifo, a socket, a character device, a hard link
// across directories, relative and dangling symbolic links, a directory
// its owner can't write, and old times.
func FillRich(t testing.TB, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(dir, "meta")
	for _, d := range []string{"sub", "setgid", "sticky", "locked"} {
		must(os.MkdirAll(filepath.Join(m, d), 0o755))
	}
	for _, f := range []string{"suid", "private", "hard1", "setgid/f", "locked/f"} {
		must(os.WriteFile(filepath.Join(m, f), []byte("content of "+f+"\n"), 0o644))
	}
	must(os.Link(filepath.Join(m, "hard1"), filepath.Join(m, "sub/hard2")))
	must(unix.Mkfifo(filepath.Join(m, "fifo"), 0o620))
	must(unix.Mknod(filepath.Join(m, "sock"), unix.S_IFSOCK|0o640, 0))
	must(unix.Mknod(filepath.Join(m, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Symlink("suid", filepath.Join(m, "link")))
	must(os.Symlink("/nowhere/at/all", filepath.Join(m, "dangling")))
	for _, p := range []string{"suid", "private", "link", "fifo", "sub", "locked", "locked/f", "null"} {
		must(os.Lchown(filepath.Join(m, p), 1234, 5678))
	}
	must(os.Chmod(filepath.Join(m, "suid"), os.ModeSetuid|0o755))
	must(os.Chmod(filepath.Join(m, "private"), 0o600))
	must(os.Chmod(filepath.Join(m, "setgid"), os.ModeSetgid|0o775))
	must(os.Chmod(filepath.Join(m, "sticky"), os.ModeSticky|0o777))
	must(os.Chmod(filepath.Join(m, "locked"), 0o500))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC).UnixNano()
	ts := []unix.Timespec{unix.NsecToTimespec(old), unix.NsecToTimespec(old)}
	for _, p := range RichNames {
		must(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, p), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

// RichWant describes each of RichNames below dir as StatLine does.
func RichWant(t testing.TB, dir string) map[string]string {
	t.Helper()
	want := map[string]string{}
	for _, p := range RichNames {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, p), &st); err != nil {
			t.Fatal(err)
		}
		want[p] = StatLine(st.Mode, st.Uid, st.Gid, uint64(st.Nlink), st.Rdev, st.Mtim.Sec)
	}
	return want
}

// StatLine is one entry's type and mode, owner, link count, device and
// (for everything but directories, whose mtime a view may change) mtime
// in seconds.
func StatLine(mode, uid, gid uint32, nlink, rdev uint64, mtime int64) string {
	l := fmt.Sprintf("%x %d:%d nlink=%d rdev=%d:%d", mode, uid, gid, nlink, unix.Major(rdev), unix.Minor(rdev))
	if mode&unix.S_IFMT != unix.S_IFDIR {
		l += " mtime=" + strconv.FormatInt(mtime, 10)
	}
	return l
}

// viewStatScript prints, in a view, what RichWant computes on the host.
func viewStatScript() string {
	return "stat -c '%n %f %u %g %h %t %T %Y %i' " + strings.Join(RichNames, " ")
}

// parseViewStat turns viewStatScript's output into StatLines, and the
// inode of each name.
func parseViewStat(t testing.TB, out string) (map[string]string, map[string]string) {
	t.Helper()
	got, inode := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 9 {
			t.Fatalf("stat output %q", line)
		}
		num := func(s string, base int) uint64 {
			v, err := strconv.ParseUint(s, base, 64)
			if err != nil {
				t.Fatalf("stat output %q: %v", line, err)
			}
			return v
		}
		got[f[0]] = StatLine(uint32(num(f[1], 16)), uint32(num(f[2], 10)), uint32(num(f[3], 10)), num(f[4], 10),
			unix.Mkdev(uint32(num(f[5], 16)), uint32(num(f[6], 16))), int64(num(f[7], 10)))
		inode[f[0]] = f[8]
	}
	return got, inode
}

// SameMetadata compares RichWant-style descriptions.
func SameMetadata(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if got[n] != want[n] {
			t.Errorf("%s: %s is %q, the source has %q", what, n, got[n], want[n])
		}
	}
}

func testMetadataSurvives(t *testing.T, f Fixture) {
	FillRich(t, f.Source)
	want := RichWant(t, f.Source)
	tree := Prepare(t, f, "meta")
	got, inode := parseViewStat(t, RunInView(t, mounts(t, f, tree), viewStatScript()))
	SameMetadata(t, "in the view", want, got)
	if inode["meta/hard1"] != inode["meta/sub/hard2"] {
		t.Errorf("in the view, the hard link is broken: inodes %s and %s", inode["meta/hard1"], inode["meta/sub/hard2"])
	}
	if tree.Kind == storage.KindOverlay {
		return // its Path is the upper: an export reads the merged view
	}
	// An export of the tree keeps the same.
	export := filepath.Join(f.Pool, "export")
	res, err := storage.CopyDir(context.Background(), tree.Path, export, storage.CopyOptions{})
	if err != nil {
		t.Fatalf("CopyDir of the tree: %v (%+v)", err, res)
	}
	t.Cleanup(func() { _ = os.RemoveAll(export) })
	SameMetadata(t, "in an export", want, RichWant(t, export))
	var a, b unix.Stat_t
	if unix.Lstat(filepath.Join(export, "meta/hard1"), &a) != nil || unix.Lstat(filepath.Join(export, "meta/sub/hard2"), &b) != nil || a.Ino != b.Ino {
		t.Errorf("in an export, the hard link is broken")
	}
	SameManifest(t, "export vs source", Manifest(t, f.Source), Manifest(t, export))
}

// testAllocationArea: a destination whose parent is a symbolic link, or
// a directory others can write or own, is refused and nothing is made
// through it; PoolDir makes a private area Prepare allocates in by
// descriptor.
func testAllocationArea(t *testing.T, f Fixture) {
	ctx := context.Background()
	real := filepath.Join(f.Pool, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(f.Pool, "link")); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode, uid int) {
		p := filepath.Join(f.Pool, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	mk("open", 0o777, 0)
	mk("group", 0o770, 0)
	mk("theirs", 0o755, 4321)
	for _, c := range []struct {
		parent string
		want   error
	}{
		{"link", safefs.ErrSymlink},
		{"open", safefs.ErrUntrusted},
		{"group", safefs.ErrUntrusted},
		{"theirs", safefs.ErrUntrusted},
	} {
		dest := filepath.Join(f.Pool, c.parent, "t")
		if _, err := f.Backend.Prepare(ctx, request(f, dest)); !errors.Is(err, c.want) {
			t.Errorf("Prepare in %s: %v, want %v", c.parent, err, c.want)
		}
		if _, err := storage.PoolDir(f.Pool, c.parent); !errors.Is(err, c.want) {
			t.Errorf("PoolDir(%s): %v, want %v", c.parent, err, c.want)
		}
	}
	for _, p := range []string{"real/t", "open/t", "group/t", "theirs/t"} {
		if _, err := os.Lstat(filepath.Join(f.Pool, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused Prepare made %s: %v", p, err)
		}
	}

	pool, err := storage.PoolDir(f.Pool, "area")
	if err != nil {
		t.Fatalf("PoolDir: %v", err)
	}
	defer pool.Close()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(f.Pool, "area"), &st); err != nil || st.Mode != unix.S_IFDIR|0o700 || int(st.Uid) != os.Geteuid() {
		t.Errorf("PoolDir made mode %o uid %d (%v)", st.Mode, st.Uid, err)
	}
	again, err := storage.PoolDir(f.Pool, "area")
	if err != nil || !again.ID().Same(pool.ID()) {
		t.Errorf("PoolDir again: %v", err)
	}
	again.Close()
	req := request(f, filepath.Join(f.Pool, "elsewhere"))
	req.Pool = pool
	if _, err := f.Backend.Prepare(ctx, req); !errors.Is(err, storage.ErrInvalidRequest) {
		t.Errorf("Prepare with a Dest outside its Pool: %v, want ErrInvalidRequest", err)
	}
	req.Dest = filepath.Join(pool.Path(), "t")
	tree, err := f.Backend.Prepare(ctx, req)
	if err != nil {
		t.Fatalf("Prepare in the pool: %v", err)
	}
	if err := f.Backend.Verify(ctx, tree); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if err := f.Backend.Remove(ctx, tree); err != nil {
		t.Errorf("Remove: %v", err)
	}
}
