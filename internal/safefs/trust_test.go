package safefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/safefs/safefstest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// CheckTrusted on real directories: the base is in /dev/shm, a
// root-owned sticky directory like /tmp, and the other user makes its
// own directories itself.
func TestCheckTrustedRealDirectories(t *testing.T) {
	testutil.RequireRoot(t)
	u := safefstest.NewUser(t)
	base := safefstest.SharedDir(t, "/dev/shm")
	if st := lstat(t, "/dev/shm"); st.Mode&0o1002 != 0o1002 || st.Uid != 0 {
		testutil.Skip(t, "/dev/shm is not a root-owned sticky world-writable directory")
	}
	p := func(rel string) string { return filepath.Join(base, rel) }
	mkdir := func(rel string, mode os.FileMode) {
		must(t, os.Mkdir(p(rel), mode))
		must(t, os.Chmod(p(rel), mode))
	}
	mkdir("ok", 0o700)
	mkdir("group", 0o770)
	mkdir("group/child", 0o700)
	mkdir("sticky", os.ModeSticky|0o777)
	mkdir("sticky/mine", 0o700)
	mkdir("theirs", 0o755)
	must(t, os.Chown(p("theirs"), u.UID, u.GID))
	u.Run(t, "cd "+p("theirs")+" && mkdir open && chmod 777 open && mkdir -m 1777 sticky && mkdir -m 700 private")
	must(t, os.Symlink("ok", p("link")))
	must(t, os.WriteFile(p("file"), nil, 0o600))
	uid := strconv.Itoa(u.UID)

	for _, c := range []struct {
		path  string
		owner int
		want  error  // nil, ErrUntrusted, ErrSymlink
		says  string // in the message, besides the path named
		names string // the offending directory
	}{
		{p("ok"), 0, nil, "", ""},
		{p("ok/not/made/yet"), 0, nil, "", ""},
		{p("sticky/mine"), 0, nil, "", ""}, // a root sticky ancestor, like /tmp
		{p("sticky"), 0, safefs.ErrUntrusted, "chmod go-w", p("sticky")},
		{p("group/child"), 0, safefs.ErrUntrusted, "writable by its group", p("group")},
		{p("theirs/open/x"), 0, safefs.ErrUntrusted, "owned by uid " + uid, p("theirs")},
		{p("theirs/open"), u.UID, safefs.ErrUntrusted, "writable by its group and others", p("theirs/open")},
		{p("theirs/private"), u.UID, nil, "", ""},
		{p("theirs/private"), 0, safefs.ErrUntrusted, "owned by uid " + uid, p("theirs")},
		{p("theirs/sticky/x"), u.UID, safefs.ErrUntrusted, "writable", p("theirs/sticky")}, // sticky, but not root's
		{p("link/x"), 0, safefs.ErrSymlink, "name the real directory (" + p("ok") + ")", p("link")},
		{p("file/x"), 0, safefs.ErrUntrusted, "not a directory", p("file")},
	} {
		err := safefs.CheckTrusted(c.path, c.owner)
		switch {
		case c.want == nil:
			if err != nil {
				t.Errorf("CheckTrusted(%s, %d): %v", c.path, c.owner, err)
			}
		case !errors.Is(err, c.want):
			t.Errorf("CheckTrusted(%s, %d): %v, want %v", c.path, c.owner, err, c.want)
		case !strings.HasPrefix(err.Error(), c.names+" ") || !strings.Contains(err.Error(), c.says):
			t.Errorf("CheckTrusted(%s, %d): %q should begin with %s and say %q", c.path, c.owner, err, c.names, c.says)
		}
	}
	if err := safefs.CheckTrusted("relative", 0); err == nil {
		t.Errorf("CheckTrusted of a relative path: no error")
	}
}
