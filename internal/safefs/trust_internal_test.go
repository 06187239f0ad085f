package safefs

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTrustedRule(t *testing.T) {
	const me = 1000
	dir := func(perm uint32) uint32 { return unix.S_IFDIR | perm }
	for _, c := range []struct {
		name     string
		e        entry
		owner    int
		ancestor bool
		want     error  // nil, ErrUntrusted or ErrSymlink
		says     string // part of the message
	}{
		{"root 0755 ancestor", entry{"/", dir(0o755), 0, ""}, me, true, nil, ""},
		{"mine 0700", entry{"/s", dir(0o700), me, ""}, me, false, nil, ""},
		{"mine 0755", entry{"/s", dir(0o755), me, ""}, me, false, nil, ""},
		{"root-owned 0711 for me", entry{"/s", dir(0o711), 0, ""}, me, false, nil, ""},
		{"another user's", entry{"/s", dir(0o700), 1001, ""}, me, false, ErrUntrusted, "owned by uid 1001, not by uid 1000 or root"},
		{"another user's, for root", entry{"/s", dir(0o755), 1001, ""}, 0, true, ErrUntrusted, "not by root"},
		{"mine but 0777", entry{"/s", dir(0o777), me, ""}, me, false, ErrUntrusted, "writable by its group and others"},
		{"group-writable ancestor", entry{"/g", dir(0o775), 0, ""}, 0, true, ErrUntrusted, "chmod go-w /g"},
		{"other-writable only", entry{"/o", dir(0o757), 0, ""}, 0, true, ErrUntrusted, "writable by others"},
		{"sticky root ancestor (/tmp)", entry{"/tmp", dir(0o1777), 0, ""}, me, true, nil, ""},
		{"sticky root as the directory itself", entry{"/tmp", dir(0o1777), 0, ""}, me, false, ErrUntrusted, "chmod go-w /tmp"},
		{"sticky but not root's", entry{"/t", dir(0o1777), me, ""}, me, true, ErrUntrusted, "writable"},
		{"sticky group-writable root ancestor", entry{"/t", dir(0o1770), 0, ""}, me, true, nil, ""},
		{"symlink", entry{"/var/run", unix.S_IFLNK | 0o777, 0, "/run"}, me, true, ErrSymlink, "name the real directory (/run)"},
		{"relative symlink", entry{"/a/l", unix.S_IFLNK | 0o777, 0, "../b"}, me, true, ErrSymlink, "(/b)"},
		{"regular file", entry{"/f", unix.S_IFREG | 0o644, 0, ""}, me, false, ErrUntrusted, "not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := trusted(c.e, c.owner, c.ancestor)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("trusted: %v, want nil", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("trusted: %v, want %v", err, c.want)
			case c.want != nil && !strings.Contains(err.Error(), c.says):
				t.Errorf("message %q does not say %q", err, c.says)
			}
		})
	}
}

func TestFileIDSame(t *testing.T) {
	for _, c := range []struct {
		a, b FileID
		want bool
	}{
		{FileID{1, 2, 0}, FileID{1, 2, 0}, true},
		{FileID{1, 2, 0}, FileID{1, 3, 0}, false},
		{FileID{1, 2, 0}, FileID{4, 2, 0}, false},
		{FileID{0, 0, 0}, FileID{0, 0, 0}, false}, // nothing recorded
		{FileID{1, 2, 9}, FileID{7, 2, 9}, true},  // btrfs remounted: same fsid, new st_dev
		{FileID{1, 2, 9}, FileID{1, 2, 8}, false}, // another subvolume
		{FileID{1, 2, 9}, FileID{1, 2, 0}, true},  // fsid on one side only: st_dev decides
		{FileID{1, 2, 9}, FileID{3, 2, 0}, false},
	} {
		if got := c.a.Same(c.b); got != c.want {
			t.Errorf("%v.Same(%v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		root, p string
		want    bool
	}{
		{"/a", "/a", true},
		{"/a", "/a/b", true},
		{"/a", "/ab", false},
		{"/a", "/", false},
		{"/a/b", "/a", false},
		{"/", "/x", true},
		{"/a", "/a/../b", false},
		{"a", "a/b", false}, // relative paths are never within
		{"/a", "/a/..b", true},
	} {
		if got := Within(c.root, filepathClean(c.p)); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.root, c.p, got, c.want)
		}
	}
}

// filepathClean cleans absolute paths only, as callers of Within do.
func filepathClean(p string) string {
	if strings.HasPrefix(p, "/") {
		return filepath.Clean(p)
	}
	return p
}
