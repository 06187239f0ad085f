package e2b_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
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
	List     []result          `json:"list"`
}

// c is one call of a batch: the key's name (alice when empty; a string
// that is no key's name is sent as the key) and the verb with its
// arguments.
type c struct {
	Key  string   `json:"key,omitempty"`
	Call []string `json:"call"`
}

// batch runs calls in order in one Node process (starting Node and
// loading the SDK costs seconds on a loaded machine) with SDK sdk.
func batch(t *testing.T, f *e2btest.Front, sdk string, calls ...c) []result {
	t.Helper()
	b, err := json.Marshal(calls)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSpace(f.Node(t, e2btest.Run{Script: planeScript, SDK: sdk, Args: []string{"batch", string(b)}}))
	var res []result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil || len(res) != len(calls) {
		t.Fatalf("plane.mjs batch %s: %v\n%s", b, err, out)
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
			r := batch(t, f, sdk,
				c{Call: []string{"create", "base", "600000", `{"suite":"` + sdk + `","n":"1"}`}},
				c{Call: []string{"create", "tmpl", "600000", `{"suite":"` + sdk + `","n":"2"}`}},
				c{Key: "bob", Call: []string{"create", "base", "600000", suite}})
			base, tmpl, bobs := ok(t, "create base", r[0]), ok(t, "create tmpl", r[1]), ok(t, "create as bob", r[2])
			if base.Token == "" || base.Token == tmpl.Token {
				t.Errorf("access tokens %q and %q: want each sandbox its own", base.Token, tmpl.Token)
			}

			// The environments behind them, as hostfork records them.
			for _, x := range []struct {
				id, tmpl, key, n string
			}{{base.ID, "base", "alice", "1"}, {tmpl.ID, "tmpl", "alice", "2"}, {bobs.ID, "base", "bob", ""}} {
				envs := envsOf(t, f, x.id)
				if len(envs) != 1 {
					t.Fatalf("sandbox %s: %d environments, want 1", x.id, len(envs))
				}
				e := envs[0]
				if e.State != api.EnvActive || e.Labels["e2b.template"] != x.tmpl || e.Labels["e2b.key"] != x.key || e.Labels["e2b.meta/suite"] != sdk || e.Labels["e2b.meta/n"] != x.n || e.OwnerExit != "detach" || e.DeadlineAt == nil {
					t.Fatalf("sandbox %s: environment %s state %s labels %v owner_exit %s deadline %v", x.id, e.ID, e.State, e.Labels, e.OwnerExit, e.DeadlineAt)
				}
				if x.tmpl == "tmpl" && e.Labels["from"] != "template" {
					t.Errorf("sandbox %s: the template's own label is missing: %v", x.id, e.Labels)
				}
				if d := time.Until(*e.DeadlineAt); d < 5*time.Minute || d > 601*time.Second {
					t.Errorf("sandbox %s: deadline in %v, want the 600 s timeout", x.id, d)
				}
			}

			r = batch(t, f, sdk,
				c{Call: []string{"list", `{"metadata":` + suite + `}`}},                   // 0
				c{Call: []string{"list", `{"metadata":{"suite":"` + sdk + `","n":"2"}}`}}, // 1
				c{Key: "bob", Call: []string{"list", `{"metadata":` + suite + `}`}},       // 2
				c{Call: []string{"info", tmpl.ID}},                                        // 3
				c{Key: "bob", Call: []string{"info", base.ID}},                            // 4
				c{Key: "bob", Call: []string{"kill", base.ID}},                            // 5
				c{Call: []string{"kill", base.ID}},                                        // 6
				c{Call: []string{"kill", base.ID}},                                        // 7
				c{Call: []string{"list", `{"metadata":` + suite + `}`}},                   // 8
				c{Call: []string{"info", base.ID}},                                        // 9
			)
			// List: the caller key's only, filtered by metadata, over pages.
			if got := ids(ok(t, "list", r[0]).List); !sameSet(got, []string{base.ID, tmpl.ID}) {
				t.Errorf("alice's list of suite %s: %v, want %s and %s", sdk, got, base.ID, tmpl.ID)
			}
			if got := ids(ok(t, "list n=2", r[1]).List); !sameSet(got, []string{tmpl.ID}) {
				t.Errorf("alice's list of n=2: %v, want %s", got, tmpl.ID)
			}
			if got := ids(ok(t, "bob's list", r[2]).List); !sameSet(got, []string{bobs.ID}) {
				t.Errorf("bob's list: %v, want only %s", got, bobs.ID)
			}
			if info := ok(t, "info", r[3]); info.Template != "tmpl" || info.State != "running" || info.Metadata["n"] != "2" {
				t.Errorf("info of %s: %+v", tmpl.ID, info)
			}
			// Another key's sandbox is not found, and bob can't kill it.
			if r[4].Error != "SandboxNotFoundError" {
				t.Errorf("bob's getInfo of alice's sandbox: %+v, want SandboxNotFoundError", r[4])
			}
			if r[5].Killed == nil || *r[5].Killed {
				t.Errorf("bob's kill of alice's sandbox: %+v, want false", r[5])
			}
			// Kill: once true, then false; gone from the list; the
			// environment stopped.
			if r[6].Killed == nil || !*r[6].Killed || r[7].Killed == nil || *r[7].Killed {
				t.Errorf("kill, kill: %+v %+v, want true then false", r[6], r[7])
			}
			if got := ids(ok(t, "list after kill", r[8]).List); !sameSet(got, []string{tmpl.ID}) {
				t.Errorf("list after the kill: %v, want %s", got, tmpl.ID)
			}
			if r[9].Error != "SandboxNotFoundError" {
				t.Errorf("getInfo of a killed sandbox: %+v", r[9])
			}
			if envs := envsOf(t, f, base.ID); envs[0].State != api.EnvStopped {
				t.Errorf("killed sandbox's environment: %s", envs[0].State)
			}
			r = batch(t, f, sdk, c{Call: []string{"kill", tmpl.ID}}, c{Key: "bob", Call: []string{"kill", bobs.ID}})
			ok(t, "kill tmpl", r[0])
			ok(t, "kill bob's", r[1])
		})
	}

	// Bad input: each refused with its reason, nothing made.
	const badKey = "e2b_not-a-key-of-this-server"
	bad := []struct {
		name string
		call c
		want []string
	}{
		{"unknown template", c{Call: []string{"create", "nosuch"}}, []string{"nosuch", "not found", "NAME.yaml"}},
		{"bad template name", c{Call: []string{"create", "../x"}}, []string{"template", "letters"}},
		{"bad key", c{Key: badKey, Call: []string{"create", "base"}}, []string{"X-API-KEY"}},
		{"metadata not a label", c{Call: []string{"create", "base", "60000", `{"a key":"v"}`}}, []string{"metadata key", "a key"}},
		{"network policy", c{Call: []string{"create", "base", "60000", "{}", `{"allowInternetAccess":false}`}}, []string{"network"}},
		{"volumes", c{Call: []string{"create", "base", "60000", "{}", `{"volumeMounts":{"/data":"vol"}}`}}, []string{"volume"}},
		{"too short a timeout", c{Call: []string{"create", "base", "1000"}}, []string{"timeout"}},
	}
	calls := []c{{Key: badKey, Call: []string{"list"}}}
	for _, b := range bad {
		calls = append(calls, b.call)
	}
	r := batch(t, f, e2btest.SDK, calls...)
	if r[0].Error != "AuthenticationError" {
		t.Errorf("list with a bad key: %+v, want AuthenticationError (401)", r[0])
	}
	for i, b := range bad {
		for _, w := range b.want {
			if got := r[i+1]; got.Error == "" || !strings.Contains(got.Message, w) {
				t.Errorf("%s: %+v, want an error naming %q", b.name, got, w)
			}
		}
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
// deadline is enforced: the sandbox is gone after it, or paused when it
// was made with lifecycle.onTimeout "pause" (and then resumed by connect,
// and killed for good).
func TestSDKTimeout(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	r := batch(t, f, "",
		c{Call: []string{"create", "base", "120000"}},
		c{Call: []string{"create", "base", "120000", "{}", `{"lifecycle":{"onTimeout":"pause"}}`}})
	sb, auto := ok(t, "create", r[0]), ok(t, "create with onTimeout pause", r[1])
	r = batch(t, f, "", c{Call: []string{"settimeout", sb.ID, "600000"}})
	if d := time.Until(ok(t, "setTimeout 10 min", r[0]).EndAt); d < 9*time.Minute || d > 11*time.Minute {
		t.Errorf("endAt after setTimeout(10 min) is in %v", d)
	}
	if e := envsOf(t, f, sb.ID)[0]; len(e.DeadlineMoves) != 1 {
		t.Errorf("deadline moves: %v, want 1", e.DeadlineMoves)
	}
	r = batch(t, f, "", c{Call: []string{"settimeout", sb.ID, "4000"}}, c{Call: []string{"settimeout", auto.ID, "4000"}})
	if d := time.Until(ok(t, "setTimeout 4 s", r[0]).EndAt); d > 5*time.Second {
		t.Errorf("endAt after setTimeout(4 s) is in %v", d)
	}
	ok(t, "setTimeout 4 s (onTimeout pause)", r[1])
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := batch(t, f, "", c{Call: []string{"info", sb.ID}}, c{Call: []string{"info", auto.ID}})
		if r[0].Error == "SandboxNotFoundError" && r[1].State == "paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after a 4 s timeout: %+v and %+v, want gone and paused", r[0], r[1])
		}
		time.Sleep(time.Second)
	}
	for _, id := range []string{sb.ID, auto.ID} {
		if e := envsOf(t, f, id)[0]; e.State != api.EnvStopped || e.StopReason != api.ReasonDeadline {
			t.Errorf("environment after the timeout: state %s reason %s, want stopped by the deadline", e.State, e.StopReason)
		}
	}
	// The autopaused sandbox: killed while paused, it is gone for good.
	r = batch(t, f, "", c{Call: []string{"kill", auto.ID}}, c{Call: []string{"info", auto.ID}}, c{Call: []string{"connect", auto.ID}})
	if r[0].Killed == nil || !*r[0].Killed || r[1].Error != "SandboxNotFoundError" || r[2].Error != "SandboxNotFoundError" {
		t.Errorf("kill of an autopaused sandbox, then info and connect: %+v %+v %+v", r[0], r[1], r[2])
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
			sb := ok(t, "create", batch(t, f, sdk, c{Call: []string{"create", "base", "600000"}})[0])
			first := envsOf(t, f, sb.ID)[0]
			inView := filepath.Join(home, "e2b-marker-"+sdk)
			if out, err := f.CLI("cp", marker, first.ID+":"+inView); err != nil {
				t.Fatalf("hostfork cp into the sandbox: %v\n%s", err, out)
			}
			r := batch(t, f, sdk,
				c{Call: []string{"pause", sb.ID}},
				c{Call: []string{"pause", sb.ID}},
				c{Call: []string{"info", sb.ID}},
				c{Call: []string{"list", `{"state":["paused"]}`}})
			if r[0].Paused == nil || !*r[0].Paused {
				t.Fatalf("pause: %+v", r[0])
			}
			if r[1].Paused == nil || *r[1].Paused {
				t.Errorf("second pause: %+v, want false (409: paused already)", r[1])
			}
			if ok(t, "info", r[2]).State != "paused" {
				t.Errorf("state after pause: %s", r[2].State)
			}
			if got := ids(ok(t, "list", r[3]).List); !sameSet(got, []string{sb.ID}) {
				t.Errorf("paused list: %v", got)
			}
			if e := envsOf(t, f, sb.ID)[0]; e.State != api.EnvStopped {
				t.Errorf("paused sandbox's environment: %s, want stopped", e.State)
			}
			conn := ok(t, "connect", batch(t, f, sdk, c{Call: []string{"connect", sb.ID, "600000"}})[0])
			if conn.ID != sb.ID || conn.State != "running" || conn.Token != sb.Token {
				t.Errorf("connect: %+v, want %s running with its token", conn, sb.ID)
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
			r = batch(t, f, sdk,
				c{Call: []string{"connect", sb.ID}},
				c{Call: []string{"kill", sb.ID}},
				c{Call: []string{"connect", sb.ID}})
			if ok(t, "connect running", r[0]).State != "running" {
				t.Errorf("connect to a running sandbox: %+v", r[0])
			}
			ok(t, "kill", r[1])
			if r[2].Error != "SandboxNotFoundError" {
				t.Errorf("connect to a killed sandbox: %+v", r[2])
			}
			if n := len(envsOf(t, f, sb.ID)); n != 2 {
				t.Errorf("%d environments: connecting to a running sandbox must not fork again", n)
			}
		})
	}
}

// TestSDKServerRestart: the server is SIGKILLed and started again on the
// same store; Sandbox.connect finds the sandbox, the same environment,
// with the same token (the token secret is the store's).
func TestSDKServerRestart(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	sb := ok(t, "create", batch(t, f, "", c{Call: []string{"create", "base", "600000"}})[0])
	f.Restart(t)
	r := batch(t, f, "", c{Call: []string{"connect", sb.ID}}, c{Call: []string{"kill", sb.ID}})
	if conn := ok(t, "connect after restart", r[0]); conn.ID != sb.ID || conn.State != "running" || conn.Token != sb.Token {
		t.Errorf("connect after restart: %+v, want %s running with token %s", conn, sb.ID, sb.Token)
	}
	ok(t, "kill", r[1])
	if envs := envsOf(t, f, sb.ID); len(envs) != 1 {
		t.Errorf("environments after restart: %d, want the one", len(envs))
	}
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
	if out, code := run("--e2b-listen", "0.0.0.0:0", "--e2b-keys", keys); !strings.Contains(out, "only a loopback address") || code != 122 {
		t.Errorf("non-loopback without TLS: exit %d, want 122 (usage)\n%s", code, out)
	}
	if out, code := run("--e2b-listen", "127.0.0.1:0"); !strings.Contains(out, "--e2b-keys") || code != 122 {
		t.Errorf("no keys file: exit %d, want 122\n%s", code, out)
	}
	if out, code := run("--e2b-listen", "127.0.0.1:0", "--e2b-keys", keys, "--e2b-max-upload", "lots"); !strings.Contains(out, "--e2b-max-upload") || code != 122 {
		t.Errorf("a bad --e2b-max-upload: exit %d, want 122\n%s", code, out)
	}
}

// TestServeE2BTLS: with --e2b-tls-cert/--e2b-tls-key the front answers
// HTTPS only, with the key checked as over plain HTTP.
func TestServeE2BTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	f := e2btest.Start(t, e2btest.Options{ExtraArgs: []string{"--e2b-tls-cert", certFile, "--e2b-tls-key", keyFile}})
	if !strings.HasPrefix(f.URL, "https://") {
		t.Fatalf("URL %s, want https", f.URL)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for key, want := range map[string]int{f.Keys["alice"]: 200, "e2b_wrong-key-of-nobody": 401} {
		req, _ := http.NewRequest("GET", f.URL+"/v2/sandboxes", nil)
		req.Header.Set("X-API-KEY", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.TLS == nil {
			t.Errorf("GET /v2/sandboxes over TLS: %d (tls %v), want %d", resp.StatusCode, resp.TLS != nil, want)
		}
	}
	// Over TLS the front offers HTTP/2 (ALPN h2) besides HTTP/1.1.
	h2 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	if resp, err := h2.Get(f.URL + "/health"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.ProtoMajor != 2 {
		t.Errorf("a client offering h2 over TLS got %s, want HTTP/2", resp.Proto)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(strings.Replace(f.URL, "https://", "http://", 1) + "/v2/sandboxes")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %d, want it refused", resp.StatusCode)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hostfork test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
