package testutil

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"os/user"
	"strconv"
	"testing"
	"time"
)

// User is a real, unprivileged second user of this host, made for one
// test: the other local user of DESIGN.md, "Trust model".
type User struct {
	Name     string
	UID, GID int
}

// UserOptions shape a test user: by default it has no home directory and
// no login shell.
type UserOptions struct {
	// Home creates a home directory and gives the user /bin/sh.
	Home bool
}

// NewUser creates a throwaway user named prefix + random hex (at most 32
// characters in all) and removes it when the test ends, also when it
// fails. Register it before anything that starts processes as that user,
// so that those are gone when userdel runs. It needs root and useradd
// (skipping otherwise, failing under HOSTFORK_TEST_STRICT=1).
func NewUser(t testing.TB, prefix string, o UserOptions) *User {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"useradd", "userdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			Skip(t, tool+" is not installed")
		}
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	args := []string{"-M", "-U", "-s", "/usr/sbin/nologin", name}
	del := []string{name}
	if o.Home {
		args = []string{"--create-home", "-U", "-s", "/bin/sh", name}
		del = []string{"--remove", name}
	}
	if out, err := userTool("useradd", args...); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := userTool("userdel", del...); err != nil {
			t.Errorf("cleanup: userdel %s: %v: %s", name, err, out)
		}
	})
	pw, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	u := &User{Name: name}
	u.UID, _ = strconv.Atoi(pw.Uid)
	u.GID, _ = strconv.Atoi(pw.Gid)
	if u.UID == 0 || u.GID == 0 {
		t.Fatalf("user %s has uid %d gid %d", name, u.UID, u.GID)
	}
	return u
}

// userTool runs useradd or userdel, retrying while another process holds
// the password database's lock (tests in other packages create users
// too).
func userTool(name string, args ...string) ([]byte, error) {
	var out []byte
	var err error
	for try := 0; try < 50; try++ {
		out, err = exec.Command(name, args...).CombinedOutput()
		if err == nil || !bytes.Contains(bytes.ToLower(out), []byte("lock")) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out, err
}
