package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process/processconnect"
)

// rawFront speaks raw HTTP to a real serve's E2B-compatible front.
type rawFront struct {
	t      *testing.T
	url    string
	client *http.Client
}

// do sends one request: the control plane's X-API-KEY when key is set,
// the envd headers when sandbox is set. It answers the status and body.
func (r rawFront) do(method, path, key, sandbox, token, ctype string, body io.Reader) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.url+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	if sandbox != "" {
		req.Header.Set("E2b-Sandbox-Id", sandbox)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sandboxHeaders adds a sandbox's envd headers to every request.
type sandboxHeaders struct{ id, token string }

func (h sandboxHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	r.Header.Set("X-Access-Token", h.token)
	return http.DefaultTransport.RoundTrip(r)
}

// refusedBody is a request body of zeros that stops (an error) as soon
// as refused is set: a client that stops sending once the server said no.
type refusedBody struct {
	sent    atomic.Int64
	refused atomic.Bool
}

func (b *refusedBody) Read(p []byte) (int, error) {
	if b.refused.Load() {
		return 0, io.ErrUnexpectedEOF
	}
	clear(p)
	b.sent.Add(int64(len(p)))
	return len(p), nil
}

// TestServeE2BBadInput: bad input over raw HTTP (and connect-go's client)
// to a real serve, past its router (E2b-Sandbox-Id): a bad or missing key
// is 401, another key's sandbox 404 (get, kill, timeout), an unknown
// template 404 naming it, a wrong access token 401 (also another
// sandbox's), a malformed Connect envelope and malformed JSON answered in
// Connect's terms, an unknown method or service Connect's unimplemented,
// a cwd outside the view invalid_argument, and a declared 2 GiB upload
// refused (413) before it is read: the client stops sending after the
// refusal, and nothing is written.
func TestServeE2BBadInput(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	r := rawFront{t: t, url: f.URL, client: &http.Client{Timeout: time.Minute}}
	alice, bob := f.Keys["alice"], f.Keys["bob"]
	const badKey = "e2b_not-a-key-of-this-server"

	// Without TLS the front speaks HTTP/2 with prior knowledge (h2c), as
	// Connect's clients may, besides HTTP/1.1.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	if resp, err := (&http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &h2c}}).Get(f.URL + "/health"); err != nil {
		t.Errorf("h2c: %v", err)
	} else if resp.Body.Close(); resp.ProtoMajor != 2 {
		t.Errorf("h2c: %s, want HTTP/2", resp.Proto)
	}

	for _, k := range []string{"", badKey} {
		code, body := r.do("POST", "/v2/sandboxes", k, "", "", "application/json", strings.NewReader(`{"templateID":"base"}`))
		if code != 401 || !strings.Contains(body, `"code":401`) || !strings.Contains(body, "X-API-KEY") {
			t.Errorf("create with key %q: %d %s, want 401 naming X-API-KEY", k, code, body)
		}
	}
	code, body := r.do("POST", "/v2/sandboxes", alice, "", "", "application/json", strings.NewReader(`{"templateID":"nosuch"}`))
	if code != 404 || !strings.Contains(body, "nosuch") {
		t.Errorf("create from an unknown template: %d %s, want 404 naming it", code, body)
	}
	create := func(key string) (id, token string) {
		t.Helper()
		code, body := r.do("POST", "/v2/sandboxes", key, "", "", "application/json", strings.NewReader(`{"templateID":"base","timeout":300}`))
		var s struct{ SandboxID, EnvdAccessToken string }
		if err := json.Unmarshal([]byte(body), &s); code != 201 || err != nil || s.SandboxID == "" || s.EnvdAccessToken == "" {
			t.Fatalf("create: %d %s (%v)", code, body, err)
		}
		t.Cleanup(func() { r.do("DELETE", "/sandboxes/"+s.SandboxID, key, "", "", "", nil) })
		return s.SandboxID, s.EnvdAccessToken
	}
	id, token := create(alice)
	bobID, bobToken := create(bob)

	// Another key's sandbox: not found, and untouched.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + id, ""},
		{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":5}`},
		{"POST", "/sandboxes/" + id + "/pause", ""},
		{"DELETE", "/sandboxes/" + id, ""},
	} {
		if code, body := r.do(c.method, c.path, bob, "", "", "application/json", strings.NewReader(c.body)); code != 404 {
			t.Errorf("bob's %s %s: %d %s, want 404", c.method, c.path, code, body)
		}
	}
	if code, body := r.do("GET", "/sandboxes/"+id, alice, "", "", "", nil); code != 200 || !strings.Contains(body, `"state":"running"`) {
		t.Errorf("alice's sandbox after bob's calls: %d %s", code, body)
	}

	// envd: a wrong token, no token, another sandbox's token.
	for _, tok := range []string{"wrong", "", bobToken} {
		if code, body := r.do("GET", "/health", "", id, tok, "", nil); code != 401 {
			t.Errorf("health with token %q: %d %s, want 401", tok, code, body)
		}
		if code, body := r.do("POST", "/process.Process/List", "", id, tok, "application/json", strings.NewReader("{}")); code != 401 || !strings.Contains(body, `"unauthenticated"`) {
			t.Errorf("List with token %q: %d %s, want 401 unauthenticated", tok, code, body)
		}
	}
	if code, _ := r.do("GET", "/health", "", bobID, bobToken, "", nil); code != 204 {
		t.Errorf("health of bob's sandbox with its token: %d", code)
	}

	// A malformed Connect envelope: a length beyond the body, then
	// garbage JSON; malformed JSON in a unary call.
	code, body = r.do("POST", "/process.Process/Start", "", id, token, "application/connect+json", bytes.NewReader([]byte{0, 0, 0, 1, 0, '{'}))
	if code != 200 || !strings.Contains(body, `"error":{"code":"internal","message":"protocol error: promised 256 bytes`) {
		t.Errorf("a truncated envelope: %d %q", code, body)
	}
	code, body = r.do("POST", "/process.Process/Start", "", id, token, "application/connect+json", bytes.NewReader([]byte{0, 0, 0, 0, 1, '{'}))
	if code != 200 || !strings.Contains(body, `"error":{"code":"invalid_argument"`) {
		t.Errorf("an envelope of bad JSON: %d %q", code, body)
	}
	code, body = r.do("POST", "/process.Process/List", "", id, token, "application/json", strings.NewReader("{not json"))
	if code != 400 || !strings.Contains(body, `"invalid_argument"`) {
		t.Errorf("malformed JSON: %d %q", code, body)
	}

	// An unknown method or service: Connect's unimplemented.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: time.Minute, Transport: sandboxHeaders{id, token}}
	for _, p := range []string{"/process.Process/Nope", "/nosuch.Service/List"} {
		nope := connect.NewClient[process.ListRequest, process.ListResponse](hc, f.URL+p, connect.WithProtoJSON())
		if _, err := nope.CallUnary(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Errorf("%s: %v, want unimplemented", p, err)
		}
	}

	// A cwd outside the sandbox's view.
	proc := processconnect.NewProcessClient(hc, f.URL, connect.WithProtoJSON())
	st, err := proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/true", Cwd: ptrTo("/no/such/dir")}}))
	if err == nil {
		for st.Receive() {
			t.Errorf("start in /no/such/dir sent %v", st.Msg())
		}
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("a cwd outside the view: %v, want invalid_argument naming it", err)
	}

	// A declared 2 GiB upload, streamed: refused before it is read; the
	// client stops sending after the refusal; nothing is written.
	const big = "/tmp/e2b-big-upload" // in the sandbox's own /tmp
	b := &refusedBody{}
	req, err := http.NewRequest("POST", f.URL+"/files?path="+big, b)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 2 << 30
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	t0 := time.Now()
	resp, err := r.client.Do(req)
	b.refused.Store(true)
	if err != nil {
		t.Errorf("2 GiB upload: %v (sent %d bytes)", err, b.sent.Load())
	} else {
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(rb), "larger than") || !strings.Contains(string(rb), "nothing was written") {
			t.Errorf("2 GiB upload: %d %s, want 413", resp.StatusCode, rb)
		}
	}
	t.Logf("2 GiB upload refused after %v, %d bytes sent", time.Since(t0), b.sent.Load())
	if s := b.sent.Load(); s >= 1<<30 {
		t.Errorf("the client sent %d bytes before the refusal: the server read the body", s)
	}
	if code, body := r.do("GET", "/files?path="+big, "", id, token, "", nil); code != 404 {
		t.Errorf("after the refused upload, %s: %d %.200s, want 404 (nothing written)", big, code, body)
	}
	if code, _ := r.do("GET", "/health", "", id, token, "", nil); code != 204 {
		t.Errorf("health after the bad input: %d", code)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestSDKBigUpload: E2B's SDK uploads 2 GiB as a stream without a length
// (files.write of a ReadableStream): the server reads up to its bound
// (DefaultMaxUpload, 1 GiB), refuses with 413, and nothing is written;
// the SDK stops pulling the stream after the refusal.
func TestSDKBigUpload(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	const path = "/tmp/e2b-sdk-big-upload" // in the sandbox's own /tmp
	out := strings.TrimSpace(f.Node(t, e2btest.Run{Script: "testdata/bigupload.mjs", Args: []string{path}, Timeout: 5 * time.Minute}))
	var r struct {
		Error, Message string
		Pulled, After  int64
		MS             int64
		Exists         bool
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
		t.Fatalf("bigupload.mjs: %v\n%s", err, out)
	}
	t.Logf("2 GiB streamed upload: %s after %d ms, %d MiB pulled, %d more after: %s", r.Error, r.MS, r.Pulled>>20, r.After>>20, r.Message)
	if r.Error == "" || !strings.Contains(r.Message, "larger than") {
		t.Errorf("a 2 GiB upload: %+v, want it refused as larger than the bound", r)
	}
	// The stream is pulled a chunk (1 MiB) ahead; after the refusal, at
	// most a few more.
	if r.Pulled >= 2<<30 || r.After > 8<<20 {
		t.Errorf("the SDK pulled %d bytes of the 2 GiB stream (%d after the refusal): want it stopped at the refusal", r.Pulled, r.After)
	}
	if r.Exists {
		t.Errorf("%s exists after the refused upload", path)
	}
}

// TestServeE2BMaxUpload: --e2b-max-upload sets the bound: a file at the
// bound is written, one byte more is refused with 413 naming the flag,
// and nothing of it is left.
func TestServeE2BMaxUpload(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{ExtraArgs: []string{"--e2b-max-upload", "1M"}})
	r := rawFront{t: t, url: f.URL, client: &http.Client{Timeout: time.Minute}}
	alice := f.Keys["alice"]
	code, body := r.do("POST", "/v2/sandboxes", alice, "", "", "application/json", strings.NewReader(`{"templateID":"base","timeout":300}`))
	var s struct{ SandboxID, EnvdAccessToken string }
	if err := json.Unmarshal([]byte(body), &s); code != 201 || err != nil {
		t.Fatalf("create: %d %s (%v)", code, body, err)
	}
	t.Cleanup(func() { r.do("DELETE", "/sandboxes/"+s.SandboxID, alice, "", "", "", nil) })
	upload := func(path string, n int) (int, string) {
		req, err := http.NewRequest("POST", f.URL+"/files?path="+path, bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", s.EnvdAccessToken)
		resp, err := r.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := upload("/tmp/at-the-bound", 1<<20); code != 200 {
		t.Errorf("an upload of exactly 1 MiB: %d %s, want 200", code, body)
	}
	if code, body := upload("/tmp/over-the-bound", 1<<20+1); code != 413 || !strings.Contains(body, "--e2b-max-upload") {
		t.Errorf("an upload of 1 MiB + 1: %d %s, want 413 naming --e2b-max-upload", code, body)
	}
	if code, body := r.do("GET", "/files?path=/tmp/over-the-bound", "", s.SandboxID, s.EnvdAccessToken, "", nil); code != 404 {
		t.Errorf("after the refused upload: %d %.200s, want 404 (nothing written)", code, body)
	}
}
