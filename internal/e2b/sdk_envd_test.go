package e2b_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
)

// envdResult is what testdata/envd.mjs saw.
type envdResult struct {
	Error, Message, Step string
	Run                  struct {
		Stdout, Stderr string
		ExitCode       int
	}
	Fail struct {
		Error       string
		IsExitError bool
		ExitCode    int
		Stderr      string
	}
	Bg struct {
		Pid, Child           int
		PidStart, ChildStart string
		Listed               bool
		Replay               string
		Killed, KilledAgain  bool
		Wait                 string
		ExitCode             int
	}
	Files struct {
		Written, Read string
		Moved         string
		List          []string
		Exists        bool
		Events        []string
		After         []string
	}
	Envs    string
	Timeout struct {
		Error string
		Left  int
	}
	BadCwd  string
	Running []bool
	Pty     struct {
		FortyTwo, Resized bool
		ExitCode          int
	}
}

// procStart is a live process's start time, "" once it is gone.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[19]
}

// TestSDKEnvd: E2B's real SDK (both pinned versions) drives envd in a
// sandbox of a real serve: commands.run (stdout, stderr, exit code), a
// failing command's CommandExitError, a background command connected to
// by pid and killed (its whole tree gone, checked by pid and start time),
// a run past its timeoutMs (TimeoutError, the command stopped), the
// sandbox's envVars and the run's envs, a cwd outside the view,
// files write/read/list/watchDir/rename/remove, and a pty with input and
// a resize.
func TestSDKEnvd(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	for _, sdk := range []string{e2btest.SDK, e2btest.OldSDK} {
		t.Run(sdk, func(t *testing.T) {
			dir := "/tmp/sdk-files-" + sdk // in the sandbox's own /tmp
			out := strings.TrimSpace(f.Node(t, e2btest.Run{SDK: sdk, Script: "testdata/envd.mjs", Args: []string{dir}, Timeout: 4 * time.Minute}))
			var r envdResult
			if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &r); err != nil {
				t.Fatalf("envd.mjs: %v\n%s", err, out)
			}
			if r.Error != "" {
				t.Fatalf("envd.mjs, step %s: %s: %s\n%s", r.Step, r.Error, r.Message, f.Serve.Stderr())
			}
			if r.Run.Stdout != "hi\n" || r.Run.Stderr != "there\n" || r.Run.ExitCode != 0 {
				t.Errorf("commands.run: %+v", r.Run)
			}
			if r.Timeout.Error != "TimeoutError" || r.Timeout.Left != 0 {
				t.Errorf("a run past its timeoutMs: %+v, want TimeoutError and the command stopped", r.Timeout)
			}
			if r.Envs != "from-create from-run\n" {
				t.Errorf("the sandbox's envVars and the run's envs: %q", r.Envs)
			}
			if !r.Fail.IsExitError || r.Fail.ExitCode != 3 || r.Fail.Stderr != "failing\n" {
				t.Errorf("a failing command: %+v, want CommandExitError with code 3", r.Fail)
			}
			if !strings.HasPrefix(r.BadCwd, "InvalidArgumentError: ") || !strings.Contains(r.BadCwd, "/no/such/dir") {
				t.Errorf("a cwd that is not in the view: %q, want InvalidArgumentError naming it", r.BadCwd)
			}
			b := r.Bg
			if b.Pid == 0 || b.Child == 0 || b.PidStart == "" || b.ChildStart == "" || !b.Listed {
				t.Errorf("background command: %+v", b)
			}
			if b.Replay != fmt.Sprintf("child=%d\n", b.Child) || !b.Killed || b.KilledAgain || b.Wait != "CommandExitError" || b.ExitCode != -1 {
				t.Errorf("connect and kill: %+v", b)
			}
			if procStart(b.Pid) == b.PidStart || procStart(b.Child) == b.ChildStart {
				t.Errorf("after kill, the tree runs on: leader %d (%s), child %d (%s)", b.Pid, procStart(b.Pid), b.Child, procStart(b.Child))
			}
			fs := r.Files
			if fs.Written != dir+"/sub/a.txt" || fs.Read != "alpha\n" || strings.Join(fs.List, " ") != "b.txt:file sub:dir" || fs.Exists {
				t.Errorf("files: %+v", fs)
			}
			if !slices.Contains(fs.Events, "b.txt:create") || !slices.Contains(fs.Events, "sub:create") {
				t.Errorf("watchDir events: %v", fs.Events)
			}
			if strings.Join(fs.After, " ") != "c.txt" {
				t.Errorf("after rename and remove: %v", fs.After)
			}
			if fs.Moved != "beta\n" {
				t.Errorf("the renamed file: %q", fs.Moved)
			}
			if !slices.Equal(r.Running, []bool{true, false}) {
				t.Errorf("isRunning before and after kill (envd's /health): %v", r.Running)
			}
			if !r.Pty.FortyTwo || !r.Pty.Resized || r.Pty.ExitCode != 0 {
				t.Errorf("pty: %+v", r.Pty)
			}
		})
	}
}
