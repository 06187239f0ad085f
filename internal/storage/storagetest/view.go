package storagetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/moby/sys/mountinfo"
)

// helperEnv carries a viewRequest to a re-executed test binary.
const helperEnv = "HOSTFORK_STORAGETEST_VIEW"

type viewRequest struct {
	Target string          `json:"target"`
	Mounts []storage.Mount `json:"mounts"`
	Script string          `json:"script"`
}

// Main turns the test binary into the view helper when RunInView
// re-executed it, and returns otherwise. Call it first in TestMain:
//
//	func TestMain(m *testing.M) { storagetest.Main(); os.Exit(m.Run()) }
func Main() {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		return
	}
	os.Exit(viewHelper(raw))
}

// viewHelper runs in a fresh mount namespace whose mounts Go already made
// private (SysProcAttr.Unshareflags CLONE_NEWNS): it applies the mounts,
// says so on fd 3, waits for a line on stdin, then runs the script in the
// target. The namespace, and every mount in it, ends with the process.
func viewHelper(raw string) int {
	var req viewRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		fmt.Fprintln(os.Stderr, "view helper:", err)
		return 2
	}
	for _, m := range req.Mounts {
		if err := m.Apply(req.Target); err != nil {
			fmt.Fprintln(os.Stderr, "view helper:", err)
			return 3
		}
	}
	ready := os.NewFile(3, "ready")
	fmt.Fprintln(ready, "mounted")
	ready.Close()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "view helper: no go-ahead:", err)
		return 4
	}
	cmd := exec.Command("/bin/sh", "-ec", req.Script)
	cmd.Dir = req.Target
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "view helper: script:", err)
		return 5
	}
	return 0
}

// RunInView applies mounts on a fresh target directory inside a new private
// mount namespace (a re-executed test binary; see Main), runs script with
// /bin/sh -e in the target, and returns its standard output. While the
// mounts exist it checks that the namespace has them and that neither this
// process's nor PID 1's mount table shows them, and again after the helper
// exits. It fails the test if the script fails.
func RunInView(t testing.TB, mounts []storage.Mount, script string) string {
	t.Helper()
	target, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(viewRequest{Target: target, Mounts: mounts, Script: script})
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatalf("starting the view helper: %v", err)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line == "mounted\n" {
		if mountedAt("self", target) || mountedAt("1", target) {
			t.Errorf("the host mount table shows the view's mount at %s", target)
		}
		if len(mounts) > 0 && !mountedAt(strconv.Itoa(cmd.Process.Pid), target) {
			t.Errorf("the helper's namespace has no mount at %s", target)
		}
		_, _ = stdin.Write([]byte("go\n"))
	}
	stdin.Close()
	err = cmd.Wait()
	if mountedAt("self", target) {
		t.Errorf("a mount at %s is left in the host namespace", target)
	}
	if err != nil {
		t.Fatalf("view helper (mounts %+v): %v\nstderr: %s\nstdout: %s", mounts, err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

// mountedAt reports whether /proc/PID/mountinfo lists a mount point at
// target.
func mountedAt(pid, target string) bool {
	if _, err := strconv.Atoi(pid); err != nil && pid != "self" {
		return false
	}
	f, err := os.Open("/proc/" + pid + "/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, mountinfo.SingleEntryFilter(target))
	return err == nil && len(ms) > 0
}
