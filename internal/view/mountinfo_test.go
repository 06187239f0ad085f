package view

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadMountinfo marks a mount shared exactly when its optional fields
// (between the mount options and the "-" separator) carry shared:N, as
// this process's own mount table says.
func TestReadMountinfoShared(t *testing.T) {
	// One mount of each kind for certain: a tmpfs of the test's own, made
	// shared (as root; removed at the end).
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(dir, 0); err != nil {
				t.Errorf("cleanup: unmount %s: %v", dir, err)
			}
		})
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			t.Fatalf("make %s shared: %v", dir, err)
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		shared := false
		for _, x := range f[6:] {
			if x == "-" {
				break
			}
			shared = shared || strings.HasPrefix(x, "shared:")
		}
		// A mount point seen twice (stacked mounts) is shared if any is.
		want[strings.ReplaceAll(f[4], `\040`, " ")] = want[strings.ReplaceAll(f[4], `\040`, " ")] || shared
	}
	ms, err := ReadMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no mounts")
	}
	got := map[string]bool{}
	for _, m := range ms {
		got[m.Target] = got[m.Target] || m.Shared
	}
	if os.Geteuid() == 0 && !strings.Contains(string(b), "shared:") {
		t.Fatal("the shared tmpfs is not in the mount table")
	}
	for target, w := range want {
		if got[target] != w {
			t.Errorf("%s: shared %v, want %v", target, got[target], w)
		}
	}
}
