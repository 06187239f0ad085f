package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// The keeper's configuration goes through the same table parser as the
// release, with "op" taken by a callback with its six strings (keeper.c,
// op_key). A configuration it can't take whole is refused before any
// operation runs: the launcher gets the keeper's error; a good one goes on
// past an op's strings to the keys after it.
func TestKeeperConfigParse(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skip(t, "a keeper's mount namespace needs root here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	made := filepath.Join(dir, "made", "here")
	op := func(kind, target string, rest ...string) []string {
		return append([]string{"op=" + kind, target}, rest...)
	}
	msg := func(entries ...[]string) []byte {
		var all []string
		for _, e := range entries {
			all = append(all, e...)
		}
		return frameMsg([]byte(strings.Join(all, "\x00") + "\x00"))
	}
	base := []string{"env_id=k1", "owner_exit=stop", "grace_ns=1000000"}
	bad := []struct {
		name string
		msg  []byte
	}{
		{"an op with five strings", msg(base, op("mkdirs", made, "", "", "", "0"))},
		{"an op's slot out of range", msg(base, op("mkdirs", made, "", "", "", "0", "64"))},
		{"a relative target", msg(base, op("mkdirs", "made", "", "", "", "0", "0"))},
		{"an unknown kind", msg(base, op("explode", made, "", "", "", "0", "0"))},
		{"negative flags", msg(base, op("mkdirs", made, "", "", "", "-1", "0"))},
		{"an unknown key after an op", msg(base, op("mkdirs", made, "", "", "", "0", "0"), []string{"colour=blue"})},
	}
	for _, c := range bad {
		k, err := startKeeper(&KeeperSpec{Exe: exe}, c.msg)
		if err == nil {
			k.Kill()
			t.Errorf("%s: the keeper took it", c.name)
		} else if !strings.Contains(err.Error(), "reading the keeper's configuration") {
			t.Errorf("%s: %v", c.name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "made")); !os.IsNotExist(err) {
			t.Fatalf("%s: an operation ran (%v)", c.name, err)
		}
	}
	k, err := startKeeper(&KeeperSpec{Exe: exe}, msg(base[:1], op("mkdirs", made, "", "", "", "0", "0"), base[1:]))
	if err != nil {
		t.Fatal(err)
	}
	k.Kill()
	if st, err := os.Stat(made); err != nil || !st.IsDir() {
		t.Fatalf("mkdirs %s: %v", made, err)
	}
}
