package supervise_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// A keeper's descriptor 6 is its run directory, or /dev/null when it has
// none: never an empty slot that its next descriptor (its timerfd) takes
// and where it would then look for a moved deadline.
func TestKeeperRunDirSlot(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skip(t, "a keeper's mount namespace needs root here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct{ runDir, want string }{{dir, dir}, {"", os.DevNull}, {filepath.Join(dir, "missing"), os.DevNull}} {
		k, err := supervise.StartKeeper(&supervise.KeeperSpec{Exe: exe, EnvID: "k1", OwnerExit: "stop", RunDir: tc.runDir})
		if err != nil {
			t.Fatalf("run dir %q: %v", tc.runDir, err)
		}
		fd := func(n int) string {
			l, _ := os.Readlink("/proc/" + strconv.Itoa(k.ID.PID) + "/fd/" + strconv.Itoa(n))
			return l
		}
		// The keeper's own descriptors are made after it reports ready:
		// wait for its timerfd, wherever it is.
		timer := false
		for end := time.Now().Add(10 * time.Second); !timer && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			for n := 3; n < 16; n++ {
				timer = timer || fd(n) == "anon_inode:[timerfd]"
			}
		}
		got := fd(6)
		// The committed line is split at white space (keeper.c, owner_line):
		// a group path holding any is refused before it is sent.
		cerr := k.Commit("/sys/fs/cgroup/a\tb", "")
		k.Kill()
		if cerr == nil {
			t.Errorf("Commit of a group path with a tab: no error")
		}
		if !timer {
			t.Fatalf("run dir %q: the keeper made no timerfd in 10 s", tc.runDir)
		}
		if got != tc.want {
			t.Errorf("run dir %q: the keeper's descriptor 6 is %q, want %q", tc.runDir, got, tc.want)
		}
	}
}
