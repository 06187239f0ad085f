package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// The control plane driven by E2B's real SDK (two pinned versions)
// against a real hostfork serve; internal/e2b/e2btest is the harness.

const planeScript = "testdata/plane.mjs"

// result is one plane.mjs answer.
type result struct {
	Error    string            `json:"error"`
	Message  string            `json:"message"`
	ID       string            `json:"id"`
	Token    string            `json:"token"`
	State    string            `json:"state"`
	Template string            `json:"template"`
	Metadata map[string]string `json:"metadata"`
	EndAt    time.Time         `json:"endAt"`
	Killed   *bool             `json:"killed"`
	Paused   *bool             `json:"paused"`
}

func call(t *testing.T, f *e2btest.Front, r e2btest.Run) result {
	t.Helper()
	r.Script = planeScript
	out := strings.TrimSpace(f.Node(t, r))
	var res result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		t.Fatalf("plane.mjs %v: %v\n%s", r.Args, err, out)
	}
	return res
}

func callList(t *testing.T, f *e2btest.Front, r e2btest.Run) []result {
	t.Helper()
	r.Script = planeScript
	out := strings.TrimSpace(f.Node(t, r))
	var res []result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		t.Fatalf("plane.mjs %v: %v\n%s", r.Args, err, out)
	}
	return res
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func ok(t *testing.T, what string, r result) result {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("%s: %s: %s", what, r.Error, r.Message)
	}
	return r
}

// envsOf reads every environment of sandbox id from the store.
func envsOf(t *testing.T, f *e2btest.Front, id string) []api.Env {
	t.Helper()
	out, err := f.CLI("envs", "--all", "--json", "--label", "e2b.sandbox="+id)
	if err != nil {
		t.Fatalf("hostfork envs: %v\n%s", err, out)
	}
	var envs []api.Env
	if err := json.Unmarshal(out, &envs); err != nil {
		t.Fatalf("hostfork envs --json: %v\n%s", err, out)
	}
	return envs
}

func ids(rs []result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		if m[x]--; m[x] < 0 {
			return false
		}
	}
	return true
}

const specTemplate = `purpose: an E2B-compatible template of the tests
labels:
  from: template
`

// TestSDKSandboxes: create from base and from a spec template, list with
// a metadata filter (only the caller key's), get, kill; another key's
// sandbox is not found; bad input is refused with its reason. Both SDK
// versions (POST /v2/sandboxes and the older POST /sandboxes).
func TestSDKSandboxes(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{Templates: map[string]string{"tmpl": specTemplate}})
	for _, sdk := range []string{e2btest.SDK, e2btest.OldSDK} {
		t.Run(sdk, func(t *testing.T) {
			suite := `{"suite":"` + sdk + `"}`
			base := ok(t, "create base", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"create", "base", "600000", `{"suite":"` + sdk + `","n":"1"}`}}))
			tmpl := ok(t, "create tmpl", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"create", "tmpl", "600000", `{"suite":"` + sdk + `","n":"2"}`}}))
			bobs := ok(t, "create as bob", call(t, f, e2btest.Run{SDK: sdk, Key: "bob", Args: []string{"create", "base", "600000", suite}}))
			if base.Token == "" || base.Token == tmpl.Token {
				t.Errorf("access tokens %q and %q: want each sandbox its own", base.Token, tmpl.Token)
			}

			// The environments behind them, as hostfork records them.
			for _, c := range []struct {
				id, tmpl, key, n string
			}{{base.ID, "base", "alice", "1"}, {tmpl.ID, "tmpl", "alice", "2"}, {bobs.ID, "base", "bob", ""}} {
				envs := envsOf(t, f, c.id)
				if len(envs) != 1 {
					t.Fatalf("sandbox %s: %d environments, want 1", c.id, len(envs))
				}
				e := envs[0]
				if e.State != api.EnvActive || e.Labels["e2b.template"] != c.tmpl || e.Labels["e2b.key"] != c.key || e.Labels["e2b.meta/suite"] != sdk || e.Labels["e2b.meta/n"] != c.n || e.OwnerExit != "detach" || e.DeadlineAt == nil {
					t.Errorf("sandbox %s: environment %s state %s labels %v owner_exit %s deadline %v", c.id, e.ID, e.State, e.Labels, e.OwnerExit, e.DeadlineAt)
				}
				if c.tmpl == "tmpl" && e.Labels["from"] != "template" {
					t.Errorf("sandbox %s: the template's own label is missing: %v", c.id, e.Labels)
				}
				if d := time.Until(*e.DeadlineAt); d < 5*time.Minute || d > 601*time.Second {
					t.Errorf("sandbox %s: deadline in %v, want the 600 s timeout", c.id, d)
				}
			}

			// List: the caller key's only, filtered by metadata, over pages.
			if got := ids(callList(t, f, e2btest.Run{SDK: sdk, Args: []string{"list", `{"metadata":` + suite + `}`}})); !sameSet(got, []string{base.ID, tmpl.ID}) {
				t.Errorf("alice's list of suite %s: %v, want %s and %s", sdk, got, base.ID, tmpl.ID)
			}
			if got := ids(callList(t, f, e2btest.Run{SDK: sdk, Args: []string{"list", `{"metadata":{"suite":"` + sdk + `","n":"2"}}`}})); !sameSet(got, []string{tmpl.ID}) {
				t.Errorf("alice's list of n=2: %v, want %s", got, tmpl.ID)
			}
			if got := ids(callList(t, f, e2btest.Run{SDK: sdk, Key: "bob", Args: []string{"list", `{"metadata":` + suite + `}`}})); !sameSet(got, []string{bobs.ID}) {
				t.Errorf("bob's list: %v, want only %s", got, bobs.ID)
			}
			info := ok(t, "info", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"info", tmpl.ID}}))
			if info.Template != "tmpl" || info.State != "running" || info.Metadata["n"] != "2" {
				t.Errorf("info of %s: %+v", tmpl.ID, info)
			}

			// Another key's sandbox is not found, and bob can't kill it.
			if r := call(t, f, e2btest.Run{SDK: sdk, Key: "bob", Args: []string{"info", base.ID}}); r.Error != "SandboxNotFoundError" {
				t.Errorf("bob's getInfo of alice's sandbox: %+v, want SandboxNotFoundError", r)
			}
			if r := call(t, f, e2btest.Run{SDK: sdk, Key: "bob", Args: []string{"kill", base.ID}}); r.Killed == nil || *r.Killed {
				t.Errorf("bob's kill of alice's sandbox: %+v, want false", r)
			}

			// Kill: once true, then false; gone from the list; the
			// environment stopped.
			for i, want := range []bool{true, false} {
				if r := call(t, f, e2btest.Run{SDK: sdk, Args: []string{"kill", base.ID}}); r.Killed == nil || *r.Killed != want {
					t.Errorf("kill #%d: %+v, want %v", i+1, r, want)
				}
			}
			if got := ids(callList(t, f, e2btest.Run{SDK: sdk, Args: []string{"list", `{"metadata":` + suite + `}`}})); !sameSet(got, []string{tmpl.ID}) {
				t.Errorf("list after the kill: %v, want %s", got, tmpl.ID)
			}
			if envs := envsOf(t, f, base.ID); envs[0].State != api.EnvStopped {
				t.Errorf("killed sandbox's environment: %s", envs[0].State)
			}
			if r := call(t, f, e2btest.Run{SDK: sdk, Args: []string{"info", base.ID}}); r.Error != "SandboxNotFoundError" {
				t.Errorf("getInfo of a killed sandbox: %+v", r)
			}
			ok(t, "kill tmpl", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"kill", tmpl.ID}}))
			ok(t, "kill bob's", call(t, f, e2btest.Run{SDK: sdk, Key: "bob", Args: []string{"kill", bobs.ID}}))
		})
	}

	// Bad input: each refused with its reason, nothing made.
	for _, c := range []struct {
		name string
		run  e2btest.Run
		want []string
	}{
		{"unknown template", e2btest.Run{Args: []string{"create", "nosuch"}}, []string{"nosuch", "not found", "NAME.yaml"}},
		{"bad template name", e2btest.Run{Args: []string{"create", "../x"}}, []string{"template", "letters"}},
		{"bad key", e2btest.Run{RawKey: "e2b_not-a-key-of-this-server", Args: []string{"create", "base"}}, []string{"X-API-KEY"}},
		{"metadata not a label", e2btest.Run{Args: []string{"create", "base", "60000", `{"a key":"v"}`}}, []string{"metadata key", "a key"}},
		{"network policy", e2btest.Run{Args: []string{"create", "base", "60000", "{}", `{"allowInternetAccess":false}`}}, []string{"network"}},
		{"volumes", e2btest.Run{Args: []string{"create", "base", "60000", "{}", `{"volumeMounts":{"/data":"vol"}}`}}, []string{"volume"}},
		{"too short a timeout", e2btest.Run{Args: []string{"create", "base", "1000"}}, []string{"timeout"}},
	} {
		r := call(t, f, c.run)
		for _, w := range c.want {
			if r.Error == "" || !strings.Contains(r.Message, w) {
				t.Errorf("%s: %+v, want an error naming %q", c.name, r, w)
			}
		}
	}
	if r := call(t, f, e2btest.Run{RawKey: "e2b_not-a-key-of-this-server", Args: []string{"list"}}); r.Error != "AuthenticationError" {
		t.Errorf("list with a bad key: %+v, want AuthenticationError (401)", r)
	}
	out, err := f.CLI("envs", "--all", "--json", "--label", "e2b.sandbox")
	if err != nil {
		t.Fatal(err)
	}
	var envs []api.Env
	if err := json.Unmarshal(out, &envs); err != nil {
		t.Fatal(err)
	}
	if len(envs) != 6 {
		t.Errorf("%d sandbox environments in the store, want the 6 made (bad input made none)", len(envs))
	}
}

// TestSDKTimeout: setTimeout moves the deadline (both ways), and the
// deadline is enforced: the sandbox is gone after it.
func TestSDKTimeout(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	sb := ok(t, "create", call(t, f, e2btest.Run{Args: []string{"create", "base", "120000"}}))
	r := ok(t, "setTimeout 10 min", call(t, f, e2btest.Run{Args: []string{"settimeout", sb.ID, "600000"}}))
	if d := time.Until(r.EndAt); d < 9*time.Minute || d > 11*time.Minute {
		t.Errorf("endAt after setTimeout(10 min) is in %v", d)
	}
	if e := envsOf(t, f, sb.ID)[0]; len(e.DeadlineMoves) != 1 {
		t.Errorf("deadline moves: %v, want 1", e.DeadlineMoves)
	}
	r = ok(t, "setTimeout 4 s", call(t, f, e2btest.Run{Args: []string{"settimeout", sb.ID, "4000"}}))
	if d := time.Until(r.EndAt); d > 5*time.Second {
		t.Errorf("endAt after setTimeout(4 s) is in %v", d)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := call(t, f, e2btest.Run{Args: []string{"info", sb.ID}})
		if r.Error == "SandboxNotFoundError" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox is still there 90 s after a 4 s timeout: %+v", r)
		}
		time.Sleep(time.Second)
	}
	if e := envsOf(t, f, sb.ID)[0]; e.State != api.EnvStopped || e.StopReason != api.ReasonDeadline {
		t.Errorf("environment after the timeout: state %s reason %s, want stopped by the deadline", e.State, e.StopReason)
	}
}

// TestSDKPauseConnect: pause stops the processes and keeps the trees (a
// file written in the sandbox's home is there after connect, in a new
// environment forked from the stopped one); a second pause answers false
// (409); both SDK versions' connect resume it.
func TestSDKPauseConnect(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(f.Dir, "marker")
	if err := os.WriteFile(marker, []byte("kept across pause\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sdk := range []string{e2btest.SDK, e2btest.OldSDK} {
		t.Run(sdk, func(t *testing.T) {
			sb := ok(t, "create", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"create", "base", "600000"}}))
			first := envsOf(t, f, sb.ID)[0]
			inView := filepath.Join(home, "e2b-marker-"+sdk)
			if out, err := f.CLI("cp", marker, first.ID+":"+inView); err != nil {
				t.Fatalf("hostfork cp into the sandbox: %v\n%s", err, out)
			}
			if r := call(t, f, e2btest.Run{SDK: sdk, Args: []string{"pause", sb.ID}}); r.Paused == nil || !*r.Paused {
				t.Fatalf("pause: %+v", r)
			}
			if r := call(t, f, e2btest.Run{SDK: sdk, Args: []string{"pause", sb.ID}}); r.Paused == nil || *r.Paused {
				t.Errorf("second pause: %+v, want false (409: paused already)", r)
			}
			if r := ok(t, "info", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"info", sb.ID}})); r.State != "paused" {
				t.Errorf("state after pause: %s", r.State)
			}
			if got := callList(t, f, e2btest.Run{SDK: sdk, Args: []string{"list", `{"state":["paused"]}`}}); !sameSet(ids(got), []string{sb.ID}) {
				t.Errorf("paused list: %v", ids(got))
			}
			if e := envsOf(t, f, sb.ID)[0]; e.State != api.EnvStopped {
				t.Errorf("paused sandbox's environment: %s, want stopped", e.State)
			}
			c := ok(t, "connect", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"connect", sb.ID, "600000"}}))
			if c.ID != sb.ID || c.State != "running" || c.Token != sb.Token {
				t.Errorf("connect: %+v, want %s running with its token", c, sb.ID)
			}
			envs := envsOf(t, f, sb.ID)
			if len(envs) != 2 {
				t.Fatalf("%d environments after connect, want the paused one and its fork", len(envs))
			}
			var resumed api.Env
			for _, e := range envs {
				if e.ID != first.ID {
					resumed = e
				}
			}
			if resumed.State != api.EnvActive || resumed.Fork == nil || resumed.Fork.Parent != first.ID {
				t.Errorf("resumed environment %s: state %s fork %+v, want active, forked from %s", resumed.ID, resumed.State, resumed.Fork, first.ID)
			}
			out, err := f.CLI("cp", resumed.ID+":"+inView, "-")
			if err != nil || string(out) != "kept across pause\n" {
				t.Errorf("the file after connect: %q %v", out, err)
			}
			if r := ok(t, "connect running", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"connect", sb.ID}})); r.State != "running" || len(envsOf(t, f, sb.ID)) != 2 {
				t.Errorf("connect to a running sandbox: %+v (it must not fork again)", r)
			}
			ok(t, "kill", call(t, f, e2btest.Run{SDK: sdk, Args: []string{"kill", sb.ID}}))
			if r := call(t, f, e2btest.Run{SDK: sdk, Args: []string{"connect", sb.ID}}); r.Error != "SandboxNotFoundError" {
				t.Errorf("connect to a killed sandbox: %+v", r)
			}
		})
	}
}

// TestSDKServerRestart: the server is SIGKILLed and started again on the
// same store; Sandbox.connect finds the sandbox, the same environment,
// with the same token (the token secret is the store's).
func TestSDKServerRestart(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	sb := ok(t, "create", call(t, f, e2btest.Run{Args: []string{"create", "base", "120000"}}))
	f.Restart(t)
	c := ok(t, "connect after restart", call(t, f, e2btest.Run{Args: []string{"connect", sb.ID}}))
	if c.ID != sb.ID || c.State != "running" || c.Token != sb.Token {
		t.Errorf("connect after restart: %+v, want %s running with token %s", c, sb.ID, sb.Token)
	}
	if envs := envsOf(t, f, sb.ID); len(envs) != 1 || envs[0].State != api.EnvActive {
		t.Errorf("environments after restart: %d, want the one active", len(envs))
	}
	ok(t, "kill", call(t, f, e2btest.Run{Args: []string{"kill", sb.ID}}))
}

// TestServeE2BFlags: serve refuses, before it starts, a keys file others
// can read and a non-loopback address without TLS.
func TestServeE2BFlags(t *testing.T) {
	e := servertest.New(t)
	keys := filepath.Join(e.Dir, "keys")
	if err := os.WriteFile(keys, []byte("alice e2b_0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.Bin, append([]string{"serve"}, args...)...)
		cmd.Env = e.Environ()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("serve %v: %v (want it refused)\n%s", args, err, out)
		}
		return string(out), ee.ExitCode()
	}
	if out, code := run("--e2b-listen", "127.0.0.1:0", "--e2b-keys", keys); !strings.Contains(out, "chmod 600") || code == 0 {
		t.Errorf("keys file mode 0644: exit %d\n%s", code, out)
	}
	if err := os.Chmod(keys, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run("--e2b-listen", "0.0.0.0:0", "--e2b-keys", keys); !strings.Contains(out, "needs TLS") || code != 122 {
		t.Errorf("non-loopback without TLS: exit %d, want 122 (usage)\n%s", code, out)
	}
	if out, code := run("--e2b-listen", "127.0.0.1:0"); !strings.Contains(out, "--e2b-keys") || code != 122 {
		t.Errorf("no keys file: exit %d, want 122\n%s", code, out)
	}
}
