package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the registry's driver, to inspect the store
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// TestMain makes this test binary usable as hostfork itself: scripts run
// "hostfork" (a copy of this binary that testscript puts on PATH) and the Go
// tests below run it by path with argv[0] "hostfork". Hidden child modes
// (the guardian, re-executed from /proc/self/exe with its own argv[0]) are
// dispatched first, exactly as main does; a guardian that starts from a C
// constructor never reaches this code at all.
func TestMain(m *testing.M) {
	// This test binary, run as hostfork, may simulate a reboot
	// (linux.BootIDEnv); a production hostfork never does.
	linux.SimulateBootForTests()
	// As hostfork, this binary runs with one P (package oneproc, decision
	// 65); the tests themselves keep the runtime's default.
	if os.Getenv("GOMAXPROCS") == "" && filepath.Base(os.Args[0]) != "hostfork" {
		runtime.SetDefaultGOMAXPROCS()
	}
	testscript.Main(m, map[string]func(){"hostfork": main, "hostfork-sigblock": sigblockExec})
}

// TestScripts runs the CLI end-to-end scripts in testdata/script. Each
// script gets its own store ($HOSTFORK_ROOT=$WORK/store) and its own cgroup
// parent ($HOSTFORK_CGROUP_PARENT), which is killed and removed when the
// script ends, also when it fails.
func TestScripts(t *testing.T) {
	testutil.RequireRoot(t)
	m, err := cgroup.FindMount()
	if err != nil {
		testutil.Skip(t, "no writable cgroup2 mount: "+err.Error())
	}
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			return scriptEnv(env, m)
		},
		Cmds: scriptCmds,
	})
}

// scriptEnv gives one script its own store and cgroup parent, killed and
// removed when the script ends (also when it fails), and the mark that
// escaped processes carry.
func scriptEnv(env *testscript.Env, m cgroup.Mount) error {
	parent := filepath.Join(m.Path, testutil.UniqueName("hostfork-script"))
	if _, err := cgroup.Create(parent); err != nil {
		return fmt.Errorf("creating the script's cgroup parent: %w", err)
	}
	mark := testutil.UniqueName("hostfork-script")
	env.Defer(func() {
		// Processes outside the cgroup parent (the subreaper tier, or a
		// tree that escaped) carry the script's mark.
		killMarked(mark)
		if err := removeCgroupTree(parent); err != nil {
			env.T().Fatal(err)
		}
	})
	env.Setenv("HOSTFORK_ROOT", filepath.Join(env.WorkDir, "store"))
	env.Setenv("HOSTFORK_CGROUP_PARENT", parent)
	env.Setenv(markVar, mark)
	return nil
}

// scriptCmds are the script commands every script set may use.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"exitcode":    cmdExitcode,
	"json":        cmdJSON,
	"capture":     cmdCapture,
	"sql":         cmdSQL,
	"waitfile":    cmdWaitfile,
	"cgroups":     cmdCgroups,
	"alive":       cmdAlive,
	"nothingmade": cmdNothingMade,
	"waitjson":    cmdWaitJSON,
}

// removeCgroupTree kills everything left under p (only processes this test
// started can be there) and removes p with its child groups.
func removeCgroupTree(p string) error {
	g := cgroup.Open(p)
	if !g.Exists() {
		return nil
	}
	_ = g.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.WaitEmpty(ctx); err != nil {
		return fmt.Errorf("cleanup: cgroup %s still populated after cgroup.kill: %w", p, err)
	}
	if err := g.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cleanup: %w", err)
	}
	if err := testutil.RemoveV1Mirrors(p); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// markVar is inherited by every process a test starts through hostfork
// (the inherited environment policy keeps it), so cleanup can find and kill
// exactly those processes, wherever they ended up.
const markVar = "HOSTFORK_TEST_MARK"

// killMarked SIGKILLs every process whose environment has markVar=mark,
// until none is left.
func killMarked(mark string) {
	needle := []byte(markVar + "=" + mark + "\x00")
	for try := 0; try < 100; try++ {
		ents, _ := os.ReadDir("/proc")
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(append([]byte{0}, b...), append([]byte{0}, needle...)) {
				continue
			}
			if processAlive(pid) {
				found = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exitcode N PROG ARGS... runs PROG like exec and requires exit status N.
// stdout and stderr are kept for the checks that follow.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("running %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// jsonLookup walks path through v. Path components are separated by '.':
// an object key, an array index, "id=X" (the array element whose "id" is
// X) or "#" (the length of an array or object). "." alone is v itself.
func jsonLookup(v any, path string) (any, bool) {
	if path == "." {
		return v, true
	}
	for _, part := range strings.Split(path, ".") {
		switch cur := v.(type) {
		case map[string]any:
			if part == "#" {
				v = float64(len(cur))
				continue
			}
			x, ok := cur[part]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			if part == "#" {
				v = float64(len(cur))
				continue
			}
			if id, ok := strings.CutPrefix(part, "id="); ok {
				found := false
				for _, e := range cur {
					if m, ok := e.(map[string]any); ok && m["id"] == id {
						v, found = e, true
						break
					}
				}
				if !found {
					return nil, false
				}
				continue
			}
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(cur) {
				return nil, false
			}
			v = cur[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func lastStdoutJSON(ts *testscript.TestScript) any {
	var v any
	if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &v); err != nil {
		ts.Fatalf("stdout is not JSON: %v", err)
	}
	return v
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// json [-re] PATH [VALUE] checks the last stdout, parsed as JSON:
//
//	json PATH          the key exists (its value may be null)
//	! json PATH        the key is absent
//	json PATH VALUE    the value at PATH, as compact JSON, equals VALUE
//	                   (itself JSON: '"alive"', 7, null, [])
//	json -re PATH RE   the value at PATH (a string's text, else its JSON)
//	                   matches the regular expression RE
func cmdJSON(ts *testscript.TestScript, neg bool, args []string) {
	re := false
	if len(args) > 0 && args[0] == "-re" {
		re = true
		args = args[1:]
	}
	if len(args) < 1 || len(args) > 2 || (re && len(args) != 2) {
		ts.Fatalf("usage: json [-re] PATH [VALUE]")
	}
	v, ok := jsonLookup(lastStdoutJSON(ts), args[0])
	if len(args) == 1 {
		if ok == neg {
			if neg {
				ts.Fatalf("%s is present (%s), want it absent", args[0], compactJSON(v))
			}
			ts.Fatalf("%s is absent from the JSON", args[0])
		}
		return
	}
	if !ok {
		if neg {
			return
		}
		ts.Fatalf("%s is absent from the JSON", args[0])
	}
	got := compactJSON(v)
	var match bool
	if re {
		text := got
		if s, isStr := v.(string); isStr {
			text = s
		}
		match = regexp.MustCompile(args[1]).MatchString(text)
	} else {
		var want any
		if err := json.Unmarshal([]byte(args[1]), &want); err != nil {
			ts.Fatalf("expected value %q is not JSON: %v", args[1], err)
		}
		match = got == compactJSON(want)
	}
	if match == neg {
		if neg {
			ts.Fatalf("%s is %s, want it not to match %s", args[0], got, args[1])
		}
		ts.Fatalf("%s is %s, want %s", args[0], got, args[1])
	}
}

// waitjson PATH VALUE PROG ARGS... runs PROG until the value at PATH in
// its JSON stdout equals VALUE (as json PATH VALUE checks it), for facts
// that are recorded asynchronously. The bound is a safety net only. The
// last run's output stays for the checks that follow.
func cmdWaitJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: waitjson PATH VALUE PROG [ARGS...]")
	}
	var want any
	if err := json.Unmarshal([]byte(args[1]), &want); err != nil {
		ts.Fatalf("expected value %q is not JSON: %v", args[1], err)
	}
	for end := time.Now().Add(60 * time.Second); ; {
		ts.Check(ts.Exec(args[2], args[3:]...))
		var v any
		if json.Unmarshal([]byte(ts.ReadFile("stdout")), &v) == nil {
			if got, ok := jsonLookup(v, args[0]); ok && compactJSON(got) == compactJSON(want) {
				return
			}
		}
		if time.Now().After(end) {
			ts.Fatalf("%s never became %s", args[0], args[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// capture NAME [PATH] sets $NAME to the last stdout (trimmed) or to the
// value at PATH in it, parsed as JSON (a string's text, else its JSON).
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: capture NAME [PATH]")
	}
	if len(args) == 1 {
		ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
		return
	}
	v, ok := jsonLookup(lastStdoutJSON(ts), args[1])
	if !ok {
		ts.Fatalf("%s is absent from the JSON", args[1])
	}
	if s, isStr := v.(string); isStr {
		ts.Setenv(args[0], s)
		return
	}
	ts.Setenv(args[0], compactJSON(v))
}

// sql QUERY runs QUERY read-only on $HOSTFORK_ROOT/registry.sqlite and
// prints each row as its columns joined by '|'.
func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sql QUERY")
	}
	out, err := queryRegistry(ts.Getenv("HOSTFORK_ROOT"), args[0])
	ts.Check(err)
	fmt.Fprint(ts.Stdout(), out)
}

func queryRegistry(root, query string) (string, error) {
	path := filepath.Join(root, "registry.sqlite")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=30000")
	if err != nil {
		return "", err
	}
	defer db.Close()
	rows, err := db.Query(query)
	if err != nil {
		return "", fmt.Errorf("%s: %w", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(v.String)
		}
		b.WriteByte('\n')
	}
	return b.String(), rows.Err()
}

// waitfile FILE RE waits until FILE's content matches RE. The bound is a
// safety net for a broken run, not a performance expectation.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitfile FILE RE")
	}
	re := regexp.MustCompile("(?m)" + args[1])
	path := ts.MkAbs(args[0])
	for end := time.Now().Add(60 * time.Second); ; {
		b, _ := os.ReadFile(path)
		if re.Match(b) {
			return
		}
		if time.Now().After(end) {
			ts.Fatalf("%s never matched %q; content: %q", args[0], args[1], b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroups procs|groups checks the script's cgroup parent: "procs" holds
// when any process is inside it, "groups" when any child group exists.
// Use with "!" to require none.
func cmdCgroups(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: [!] cgroups procs|groups")
	}
	parent := ts.Getenv("HOSTFORK_CGROUP_PARENT")
	var found []string
	switch args[0] {
	case "procs":
		pids, err := cgroup.Open(parent).AllProcs()
		ts.Check(err)
		for _, p := range pids {
			found = append(found, strconv.Itoa(p))
		}
	case "groups":
		ents, err := os.ReadDir(parent)
		ts.Check(err)
		for _, e := range ents {
			if e.IsDir() {
				found = append(found, e.Name())
			}
		}
	default:
		ts.Fatalf("usage: [!] cgroups procs|groups")
	}
	if (len(found) > 0) == neg {
		if neg {
			ts.Fatalf("the cgroup parent still has %s: %s", args[0], strings.Join(found, " "))
		}
		ts.Fatalf("the cgroup parent has no %s", args[0])
	}
}

// alive PIDFILE holds when the process whose PID is in PIDFILE exists and
// is not a zombie. The PID was written by a process of this script moments
// earlier, so reuse within the check is not a practical concern.
func cmdAlive(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: [!] alive PIDFILE")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[0])))
	ts.Check(err)
	if processAlive(pid) == neg {
		if neg {
			ts.Fatalf("process %d is still alive", pid)
		}
		ts.Fatalf("process %d is gone", pid)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// nothingmade checks that the store holds no trace of a launch: no
// environment, no command, no pending intent, no run directory, and that
// the cgroup parent has no child group. A store that was never created
// passes too.
func cmdNothingMade(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: nothingmade")
	}
	root := ts.Getenv("HOSTFORK_ROOT")
	if _, err := os.Stat(filepath.Join(root, "registry.sqlite")); err == nil {
		out, err := queryRegistry(root, `select (select count(*) from envs), (select count(*) from commands), (select count(*) from intents)`)
		ts.Check(err)
		if strings.TrimSpace(out) != "0|0|0" {
			ts.Fatalf("the registry is not empty (envs|commands|intents): %s", out)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(root, "runs")); err == nil && len(ents) > 0 {
		ts.Fatalf("%s/runs is not empty: %s", root, ents[0].Name())
	}
	ents, err := os.ReadDir(ts.Getenv("HOSTFORK_CGROUP_PARENT"))
	ts.Check(err)
	for _, e := range ents {
		if e.IsDir() {
			ts.Fatalf("the cgroup parent has a child group: %s", e.Name())
		}
	}
}
