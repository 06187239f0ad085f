package storage_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/storage/storagetest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

func prepareCopy(t *testing.T, src, dest string, mode storage.ReflinkMode) storage.Tree {
	t.Helper()
	tree, err := storage.Copy{}.Prepare(context.Background(), storage.Request{Dest: dest, Source: src, Reflink: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := (storage.Copy{}).Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	return tree
}

// freeBytes is the filesystem's free space after a sync.
func freeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	unix.Sync()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		t.Fatal(err)
	}
	return int64(sf.Bfree) * sf.Bsize
}

func TestCopyReflinksOnBtrfs(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	src := filepath.Join(mnt, "src")
	big := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MiB
	writeFiles(t, src, map[string]string{"small": "s\n", "empty": "", "d/big": string(big)})

	free := freeBytes(t, mnt)
	tree := prepareCopy(t, src, filepath.Join(mnt, "cloned"), storage.ReflinkAuto)
	if c := tree.Copy; c.Reflink != storage.ReflinkAll || c.Files != 3 || c.Cloned != 3 || c.Bytes != int64(len(big))+2 {
		t.Errorf("reflink copy: %+v", c)
	}
	if used := free - freeBytes(t, mnt); used > 8<<20 {
		t.Errorf("a reflinked copy of 32 MiB used %d bytes", used)
	}
	if !bytes.Equal([]byte(readFile(t, filepath.Join(tree.Path, "d/big"))), big) {
		t.Errorf("cloned content differs")
	}

	free = freeBytes(t, mnt)
	plain := prepareCopy(t, src, filepath.Join(mnt, "copied"), storage.ReflinkNever)
	if c := plain.Copy; c.Reflink != storage.ReflinkNone || c.Files != 3 || c.Cloned != 0 {
		t.Errorf("ReflinkNever copy: %+v", c)
	}
	if used := free - freeBytes(t, mnt); used < 24<<20 {
		t.Errorf("a ReflinkNever copy of 32 MiB used only %d bytes: extents are shared", used)
	}
	storagetest.SameManifest(t, "never vs source", storagetest.Manifest(t, src), storagetest.Manifest(t, plain.Path))
}

func TestCopyWithoutReflinkSupport(t *testing.T) {
	dir := tmpfsDir(t)
	src := filepath.Join(dir, "src")
	writeFiles(t, src, map[string]string{"a": "alpha\n", "d/b": "beta\n"})
	tree := prepareCopy(t, src, filepath.Join(dir, "auto"), storage.ReflinkAuto)
	if c := tree.Copy; c.Reflink != storage.ReflinkNone || c.Files != 2 || c.Cloned != 0 {
		t.Errorf("copy on tmpfs: %+v", c)
	}
	storagetest.SameManifest(t, "copy vs source", storagetest.Manifest(t, src), storagetest.Manifest(t, tree.Path))

	dest := filepath.Join(dir, "always")
	_, err := storage.Copy{}.Prepare(context.Background(), storage.Request{Dest: dest, Source: src, Reflink: storage.ReflinkAlways})
	if !errors.Is(err, storage.ErrReflinkUnsupported) {
		t.Errorf("ReflinkAlways on tmpfs: %v, want ErrReflinkUnsupported", err)
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed copy left its destination: %v", err)
	}
}

// A copy keeps types, modes (setuid, setgid, sticky), ownership, times,
// symlinks, hard links and special files.
func TestCopyPreservesMetadata(t *testing.T) {
	testutil.RequireRoot(t)
	for _, fs := range []struct {
		name string
		dir  func(testing.TB) string
	}{{"tmpfs", tmpfsDir}, {"ext4", ext4Dir}} {
		t.Run(fs.name, func(t *testing.T) {
			dir := fs.dir(t)
			src := filepath.Join(dir, "src")
			writeFiles(t, src, map[string]string{
				"plain": "p\n", "empty": "", "suid": "#!/bin/sh\n", "d/setgid/f": "f\n", "d/sticky/g": "g\n",
			})
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.Chmod(filepath.Join(src, "suid"), 0o4755))
			must(os.Chmod(filepath.Join(src, "d/setgid"), 0o2775))
			must(os.Chmod(filepath.Join(src, "d/sticky"), 0o1777))
			must(os.Chmod(filepath.Join(src, "plain"), 0o640))
			must(os.Symlink("plain", filepath.Join(src, "rel-link")))
			must(os.Symlink("/nowhere/at/all", filepath.Join(src, "dangling")))
			must(os.Link(filepath.Join(src, "plain"), filepath.Join(src, "d/hardlink")))
			must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o620))
			for _, p := range []string{"plain", "suid", "d/setgid/f", "rel-link", "dangling", "fifo", "d"} {
				must(os.Lchown(filepath.Join(src, p), 1234, 5678))
			}
			must(os.Chown(filepath.Join(src, "suid"), 1234, 5678))
			must(os.Chmod(filepath.Join(src, "suid"), 0o4755)) // chown cleared it
			old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
			ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
			// Leaves first, so setting a file's time doesn't touch its directory's.
			for _, p := range []string{"dangling", "rel-link", "fifo", "plain", "d/setgid/f", "d/setgid", "d", "."} {
				must(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, p), ts, unix.AT_SYMLINK_NOFOLLOW))
			}
			want := storagetest.Manifest(t, src)

			tree := prepareCopy(t, src, filepath.Join(dir, "env"), storage.ReflinkAuto)
			storagetest.SameManifest(t, "copy vs source", want, storagetest.Manifest(t, tree.Path))
			for _, p := range []string{"plain", "suid", "d/setgid/f", "rel-link", "dangling", "fifo", "d", "empty"} {
				var a, b unix.Stat_t
				must(unix.Lstat(filepath.Join(src, p), &a))
				must(unix.Lstat(filepath.Join(tree.Path, p), &b))
				if a.Uid != b.Uid || a.Gid != b.Gid || a.Mode != b.Mode {
					t.Errorf("%s: source %d:%d %o, copy %d:%d %o", p, a.Uid, a.Gid, a.Mode, b.Uid, b.Gid, b.Mode)
				}
			}
			var p1, p2 unix.Stat_t
			must(unix.Lstat(filepath.Join(tree.Path, "plain"), &p1))
			must(unix.Lstat(filepath.Join(tree.Path, "d/hardlink"), &p2))
			if p1.Ino != p2.Ino || p1.Nlink != 2 {
				t.Errorf("hard link not kept: inodes %d/%d, nlink %d", p1.Ino, p2.Ino, p1.Nlink)
			}
			if tree.Copy.Files != 5 { // plain(+hardlink), empty, suid, f, g
				t.Errorf("files copied: %d, want 5", tree.Copy.Files)
			}

			// An export keeps the same, its top directory's included.
			must(os.Chmod(src, 0o751))
			must(os.Lchown(src, 1234, 5678))
			must(unix.UtimesNanoAt(unix.AT_FDCWD, src, ts, unix.AT_SYMLINK_NOFOLLOW))
			want = storagetest.Manifest(t, src)
			export := filepath.Join(dir, "export")
			res, err := storage.CopyDir(context.Background(), src, export, storage.CopyOptions{})
			if err != nil || res.Files != 5 || res.Failed != 0 || res.PartialPath != "" {
				t.Fatalf("CopyDir: %+v, %v", res, err)
			}
			storagetest.SameManifest(t, "export vs source", want, storagetest.Manifest(t, export))
			for _, p := range []string{".", "plain", "suid", "d/setgid/f", "rel-link", "dangling", "fifo", "d", "empty"} {
				var a, b unix.Stat_t
				must(unix.Lstat(filepath.Join(src, p), &a))
				must(unix.Lstat(filepath.Join(export, p), &b))
				if a.Uid != b.Uid || a.Gid != b.Gid || a.Mode != b.Mode {
					t.Errorf("export %s: source %d:%d %o, copy %d:%d %o", p, a.Uid, a.Gid, a.Mode, b.Uid, b.Gid, b.Mode)
				}
			}
			must(unix.Lstat(filepath.Join(export, "plain"), &p1))
			must(unix.Lstat(filepath.Join(export, "d/hardlink"), &p2))
			if p1.Ino != p2.Ino || p1.Nlink != 2 {
				t.Errorf("export: hard link not kept: inodes %d/%d, nlink %d", p1.Ino, p2.Ino, p1.Nlink)
			}
		})
	}
}

func TestCopyRejectsUnknownReflinkMode(t *testing.T) {
	dir := t.TempDir()
	_, err := storage.Copy{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(dir, "d"), Source: dir, Reflink: "sometimes"})
	if !errors.Is(err, storage.ErrInvalidRequest) {
		t.Errorf("unknown reflink mode: %v", err)
	}
}

// CopyDir never adopts or writes through what is at or on the way to its
// destination, and a failed copy leaves its partial directory, named in
// the result, not a truncated tree at the destination.
func TestCopyDirRefusesAndLeavesPartial(t *testing.T) {
	ctx := context.Background()
	dir := tmpfsDir(t)
	src := filepath.Join(dir, "src")
	writeFiles(t, src, map[string]string{"a": "alpha\n", "d/b": "beta\n"})
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "real/made"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dst  string
		want error
	}{
		{src, storage.ErrExists},
		{filepath.Join(dir, "dangling"), storage.ErrExists},
		{filepath.Join(dir, "link/out"), safefs.ErrSymlink},
		{filepath.Join(src, "d/inside"), storage.ErrInvalidRequest},
		{"relative/out", storage.ErrInvalidRequest},
	} {
		res, err := storage.CopyDir(ctx, src, c.dst, storage.CopyOptions{})
		if !errors.Is(err, c.want) || res.PartialPath != "" {
			t.Errorf("CopyDir to %s: %+v, %v, want %v", c.dst, res, err, c.want)
		}
	}
	for _, p := range []string{"real/out", "real/made", "src/d/inside"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused CopyDir made %s", p)
		}
	}

	// tmpfs can't clone: ReflinkAlways fails on the first file.
	dst := filepath.Join(dir, "out")
	res, err := storage.CopyDir(ctx, src, dst, storage.CopyOptions{Reflink: storage.ReflinkAlways})
	if !errors.Is(err, storage.ErrReflinkUnsupported) {
		t.Fatalf("CopyDir with ReflinkAlways on tmpfs: %v", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed CopyDir left its destination: %v", err)
	}
	want := filepath.Join(dir, ".out.partial-")
	if !strings.HasPrefix(res.PartialPath, want) || !strings.Contains(err.Error(), res.PartialPath) {
		t.Errorf("PartialPath %q, error %q", res.PartialPath, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(res.PartialPath, &st); err != nil || st.Mode != unix.S_IFDIR|0o700 {
		t.Errorf("the partial directory: mode %o, %v", st.Mode, err)
	}

	// A Tolerate copy records per-file errors and still finishes.
	res, err = storage.CopyDir(ctx, src, dst, storage.CopyOptions{Reflink: storage.ReflinkAlways, Tolerate: true})
	if err != nil || res.Failed != 2 || len(res.Errors) != 2 || res.PartialPath != "" {
		t.Errorf("tolerant CopyDir: %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "d")); err != nil {
		t.Errorf("tolerant CopyDir: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := storage.CopyDir(cctx, src, filepath.Join(dir, "cancelled"), storage.CopyOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled CopyDir: %v", err)
	}
}
