// Package e2btest runs a real `hostfork serve --e2b-listen` for tests and
// drives it with E2B's real SDK (the npm package e2b, pinned in
// .ci/npm/package.json at two versions): it writes a keys file (mode
// 0600) with two keys, optional spec templates, starts the server on a
// free loopback port, and runs Node scripts with E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY, E2B_KEYS (every key by name, JSON) and
// E2B_SDK (the SDK module to import) set.
// Only _test.go files import it.
package e2btest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// SDK versions the harness can run a script with: the packages of
// .ci/npm/package.json.
const (
	// SDK is e2b 2.51.0 (creates with POST /v2/sandboxes).
	SDK = "e2b"
	// OldSDK is e2b 2.45.0, installed as e2b-old (creates with POST
	// /sandboxes, connects with POST /sandboxes/{id}/connect).
	OldSDK = "e2b-old"
)

// Front is a running hostfork serve with its E2B-compatible front.
type Front struct {
	*servertest.Env
	Serve *servertest.Serve
	// URL is the front's http://127.0.0.1:PORT.
	URL string
	// Keys maps each key's name ("alice", "bob") to its secret.
	Keys map[string]string
	// KeysFile and Templates are the files given to serve.
	KeysFile, Templates string
	// NPM is the directory of the pinned npm packages.
	NPM  string
	args []string
}

// Options configure Start.
type Options struct {
	// Templates are written as Templates/NAME.yaml (name → spec YAML).
	Templates map[string]string
	// ExtraArgs are more arguments of hostfork serve.
	ExtraArgs []string
	// Bin, when set, is a hostfork built elsewhere (with its
	// hostfork-serve beside it) run instead of this tree's: a benchmark's
	// baseline.
	Bin string
}

// Start builds hostfork, makes a store, writes the keys file and the
// templates, and starts serve with --e2b-listen on a free loopback port.
// It skips (fails under HOSTFORK_TEST_STRICT=1) without root, node or the
// pinned SDKs.
func Start(t testing.TB, o Options) *Front {
	t.Helper()
	npm := testutil.NPMTools(t, SDK+"/package.json", OldSDK+"/package.json")
	env := servertest.New(t)
	env.Bin = cmp.Or(o.Bin, env.Bin)
	f := &Front{Env: env, NPM: npm, Keys: map[string]string{"alice": randomKey(t), "bob": randomKey(t)}}
	f.KeysFile = filepath.Join(env.Dir, "e2b-keys")
	var b strings.Builder
	b.WriteString("# NAME KEY\n")
	for _, name := range []string{"alice", "bob"} {
		b.WriteString(name + " " + f.Keys[name] + "\n")
	}
	if err := os.WriteFile(f.KeysFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Templates = filepath.Join(env.Dir, "templates")
	if err := os.Mkdir(f.Templates, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, y := range o.Templates {
		if err := os.WriteFile(filepath.Join(f.Templates, name+".yaml"), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.args = append([]string{"--e2b-listen", "127.0.0.1:0", "--e2b-keys", f.KeysFile, "--e2b-templates", f.Templates}, o.ExtraArgs...)
	f.start(t)
	return f
}

func (f *Front) start(t testing.TB) {
	t.Helper()
	f.Serve = f.Env.Serve(f.args...)
	if f.Serve.E2B == "" {
		t.Fatalf("hostfork serve did not say where the E2B-compatible API listens\n%s", f.Serve.Stderr())
	}
	f.URL = f.Serve.E2B
}

// Restart SIGKILLs the server (nothing of it shuts down cleanly) and
// starts it again on the same store; URL changes (a new free port).
func (f *Front) Restart(t testing.TB) {
	t.Helper()
	f.Serve.Kill(t)
	f.start(t)
}

func randomKey(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "e2b_" + hex.EncodeToString(b)
}

// Run is one Node script's run.
type Run struct {
	// Script is the .mjs file; Args its arguments.
	Script string
	Args   []string
	// SDK is SDK (default) or OldSDK.
	SDK string
	// Key is the API key's name (default "alice"); RawKey, when set, is
	// sent instead (a wrong key).
	Key, RawKey string
	// Env is more environment (K=V).
	Env []string
	// Timeout bounds the script (default 3 minutes).
	Timeout time.Duration
}

// Node runs a script with the SDK pointed at the front and returns its
// standard output; a failing script fails the test with both outputs.
func (f *Front) Node(t testing.TB, r Run) string {
	t.Helper()
	out, stderr, err := f.NodeErr(r)
	if err != nil {
		t.Fatalf("node %s %s: %v\nstdout:\n%s\nstderr:\n%s\nserver stderr:\n%s", filepath.Base(r.Script), strings.Join(r.Args, " "), err, out, stderr, f.Serve.Stderr())
	}
	return out
}

// NodeErr runs a script like Node and returns its outputs and error.
func (f *Front) NodeErr(r Run) (stdout, stderr string, err error) {
	r.Timeout = cmp.Or(r.Timeout, 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	cmd, err := f.NodeCmd(ctx, r)
	if err != nil {
		return "", "", err
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// NodeCmd is the command that runs a script with the SDK pointed at the
// front, for a caller that talks to it while it runs (r.Timeout is not
// used: ctx bounds it).
func (f *Front) NodeCmd(ctx context.Context, r Run) (*exec.Cmd, error) {
	r.SDK = cmp.Or(r.SDK, SDK)
	r.Key = cmp.Or(r.Key, "alice")
	key := f.Keys[r.Key]
	key = cmp.Or(r.RawKey, key)
	names, err := json.Marshal(f.Keys)
	if err != nil {
		return nil, err
	}
	script, err := filepath.Abs(r.Script)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, r.Args...)...)
	cmd.Dir = f.Dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+f.URL, "E2B_SANDBOX_URL="+f.URL, "E2B_API_KEY="+key,
		"E2B_SDK="+filepath.Join(f.NPM, "node_modules", r.SDK, "dist", "index.mjs"),
		"E2B_KEYS="+string(names), "E2B_DEBUG=false", "NO_COLOR=1")
	cmd.Env = append(cmd.Env, r.Env...)
	return cmd, nil
}
