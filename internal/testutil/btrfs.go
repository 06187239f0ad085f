package testutil

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// LoopBtrfs makes a fresh 1 GiB Btrfs filesystem for one test: a sparse
// image file in a new temporary directory, mkfs.btrfs, a loop device from
// losetup, mounted on a temporary directory with the given mount options
// (comma-separated, may be empty). It returns the mount point. At cleanup,
// also when the test fails, it unmounts, detaches the loop device and
// removes the image. It skips (failing under HOSTFORK_TEST_STRICT=1) when
// not root or when mkfs.btrfs, losetup, loop devices or btrfs are missing.
func LoopBtrfs(t testing.TB, options string) string {
	t.Helper()
	mnt, _ := loopFS(t, "btrfs", 1<<30, []string{"mkfs.btrfs", "-q"}, options)
	return mnt
}

// loopFS makes a filesystem of type fstype with mkfs (the command and its
// flags; the image path is appended) on a sparse image of size bytes,
// attaches it to a loop device and mounts it with options.
func loopFS(t testing.TB, fstype string, size int64, mkfs []string, options string) (string, string) {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{mkfs[0], "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			Skip(t, tool+" not found (install btrfs-progs, e2fsprogs and util-linux)")
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		Skip(t, "no loop devices: "+err.Error())
	}
	dir, err := os.MkdirTemp("", "hostfork-"+fstype+"-")
	if err != nil {
		t.Fatalf("loop %s: %v", fstype, err)
	}
	mnt := filepath.Join(dir, "mnt")
	img := filepath.Join(dir, "img")
	var dev string
	mounted := false
	t.Cleanup(func() {
		if mounted {
			if err := unmountRetrying(mnt); err != nil {
				// Don't remove a directory with a filesystem still on it.
				t.Errorf("loop %s cleanup: unmounting %s: %v (left %s in place)", fstype, mnt, err, dir)
				return
			}
		}
		if dev != "" {
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Errorf("loop %s cleanup: losetup -d %s: %v: %s", fstype, dev, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("loop %s cleanup: %v", fstype, err)
		}
	})
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatalf("loop %s: %v", fstype, err)
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("loop %s: %v", fstype, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("loop %s: sizing the image: %v", fstype, err)
	}
	if out, err := exec.Command(mkfs[0], append(mkfs[1:], img)...).CombinedOutput(); err != nil {
		t.Fatalf("loop %s: %s: %v: %s", fstype, mkfs[0], err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = ee.Stderr
		}
		Skip(t, "losetup -f --show: "+err.Error()+": "+string(bytes.TrimSpace(out)))
	}
	dev = strings.TrimSpace(string(out))
	if err := unix.Mount(dev, mnt, fstype, 0, options); err != nil {
		if errors.Is(err, unix.ENODEV) {
			Skip(t, "the kernel has no "+fstype)
		}
		t.Fatalf("loop %s: mounting %s on %s: %v", fstype, dev, mnt, err)
	}
	mounted = true
	return mnt, dev
}

// unmountRetrying unmounts mnt, retrying briefly while it is busy (a
// process of the test may still be exiting), then detaches it lazily.
func unmountRetrying(mnt string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = unix.Unmount(mnt, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINTR) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	if derr := unix.Unmount(mnt, unix.MNT_DETACH); derr != nil {
		return errors.Join(err, derr)
	}
	return nil
}

// LoopXFS makes a fresh 1 GiB XFS filesystem with reflink for one test,
// like LoopBtrfs (mkfs.xfs -m reflink=1), and returns its mount point.
func LoopXFS(t testing.TB) string {
	t.Helper()
	mnt, _ := loopFS(t, "xfs", 1<<30, []string{"mkfs.xfs", "-q", "-m", "reflink=1"}, "")
	return mnt
}
