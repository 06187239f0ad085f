package server

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A socket in a directory another user can write could be replaced by
// theirs, and the clients' requests (environment values included) would
// go to them (issue 39, item 2): Listen refuses such a directory, names
// it and says what to do, and makes nothing there.
func TestListenRefusesUntrustedDirectory(t *testing.T) {
	u := testutil.NewUser(t, "hfl", testutil.UserOptions{})
	theirs, err := os.MkdirTemp("", "hostfork-listen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(theirs) })
	if err := os.Chown(theirs, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	open, err := os.MkdirTemp("", "hostfork-listen-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{theirs, "owned by uid " + strconv.Itoa(u.UID)},
		{open, "writable by"},
	} {
		s, err := Listen(ListenOptions{Path: filepath.Join(c.dir, "api.sock"), UID: os.Geteuid(), GID: os.Getegid()})
		if err == nil {
			s.Close()
			t.Errorf("%s: Listen accepted a directory another user can write", c.dir)
			continue
		}
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "choose a --socket") {
			t.Errorf("%s: want an ErrInvalid naming %q and the fix: %v", c.dir, c.want, err)
		}
		if ents, _ := os.ReadDir(c.dir); len(ents) != 0 {
			t.Errorf("%s: Listen left %d entries behind", c.dir, len(ents))
		}
	}
}
