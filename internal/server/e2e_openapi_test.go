package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// validator is an HTTP proxy in front of a real server that checks every
// response against the server's own OpenAPI document with kin-openapi's
// openapi3filter (a validator nobody here wrote), and remembers which
// operations answered with success.
type validator struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	url    string

	mu       sync.Mutex
	answered map[string]bool // "GET /v1/envs/{id}" → a 2xx was validated
	failures []string
}

func newValidator(t *testing.T, socket string) *validator {
	t.Helper()
	body, code := curl(t, socket, "http://localhost/v1/openapi.json")
	if code != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %s", code, body)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(body)
	if err != nil {
		t.Fatalf("kin-openapi loads the document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("kin-openapi validates the document: %v", err)
	}
	doc.Servers = nil // match any host: the proxy listens on loopback TCP
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &validator{t: t, doc: doc, router: router, answered: map[string]bool{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = "http", "localhost", "localhost"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
		ModifyResponse: v.check,
		FlushInterval:  -1,
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	v.url = srv.URL
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, f := range v.failures {
			t.Error(f)
		}
	})
	return v
}

func (v *validator) fail(format string, args ...any) {
	v.mu.Lock()
	v.failures = append(v.failures, fmt.Sprintf(format, args...))
	v.mu.Unlock()
}

// check validates one response (its status, headers and body) against the
// operation its request matched.
func (v *validator) check(resp *http.Response) error {
	req := resp.Request.Clone(resp.Request.Context())
	req.URL.Host, req.Host = "localhost", "localhost"
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		v.fail("%s %s: no operation in the document: %v", req.Method, req.URL.Path, err)
		return nil
	}
	op := req.Method + " " + route.Path
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (a terminal's byte stream): the document
		// says the operation exists; there is no body to check.
		v.mu.Lock()
		v.answered[op] = true
		v.mu.Unlock()
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	// Bodies that stream until their end: checked by content type (and
	// NDJSON line by line below), not read here.
	streamed := strings.HasPrefix(ct, "application/octet-stream") || strings.HasPrefix(ct, "application/x-ndjson") ||
		strings.HasPrefix(ct, "text/event-stream")
	var body []byte
	if !streamed {
		if body, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: streamed},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		v.fail("%s → %d: the response does not match the document: %v\n%.2000s", op, resp.StatusCode, err, body)
		return nil
	}
	if strings.HasPrefix(ct, "application/x-ndjson") {
		// One api.Event per line: each line is checked as it passes.
		sch := route.Operation.Responses.Status(resp.StatusCode).Value.Content.Get("application/x-ndjson").Schema.Value
		pr, pw := io.Pipe()
		src := resp.Body
		resp.Body = pr
		go func() {
			defer src.Close()
			sc := bufio.NewScanner(io.TeeReader(src, pw))
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var val any
				if err := json.Unmarshal(sc.Bytes(), &val); err != nil {
					v.fail("%s: a line is not JSON: %v: %s", op, err, sc.Bytes())
				} else if err := sch.VisitJSON(val); err != nil {
					v.fail("%s: a line does not match the document: %v: %s", op, err, sc.Bytes())
				}
			}
			pw.CloseWithError(sc.Err())
		}()
	}
	if resp.StatusCode < 300 {
		v.mu.Lock()
		v.answered[op] = true
		v.mu.Unlock()
	}
	return nil
}

// unanswered lists the document's operations no validated success
// answered.
func (v *validator) unanswered() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			if op := method + " " + path; !v.answered[op] {
				out = append(out, op)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIResponses: every operation of the document is called on a
// real server, and each response (successes and errors alike) is checked
// against the document by an outside validator.
func TestOpenAPIResponses(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	v := newValidator(t, s.Socket)
	c, err := client.New(v.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxFor(t, 3*time.Minute)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	get := func(path string) {
		t.Helper()
		resp, err := http.Get(v.url + path)
		must("GET "+path, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}

	must("ping", c.Ping(ctx))
	_, err = c.Version(ctx)
	must("version", err)
	get("/v1/openapi.json")
	get("/metrics")
	_, err = c.Plan(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}})
	must("plan", err)

	src, target := treeSource(t, e)
	env, err := c.CreateEnv(ctx, map[string]any{
		"purpose": "openapi", "labels": map[string]string{"test": "openapi"},
		"lifetime": map[string]any{"max_runtime": "5m"},
		"trees":    map[string]any{"work": map[string]any{"kind": "copy", "source": src}},
		"view":     map[string]any{"replace": map[string]string{target: "work"}},
	})
	must("create", err)
	t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), env.ID, client.StopOptions{}) })
	_, _, err = c.Resolve(ctx, env.ID[:8])
	must("resolve", err)
	sleeper, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sleep", "60"}, Purpose: "sleeper"})
	must("start", err)
	_, err = c.Signal(ctx, sleeper.ID, syscall.SIGTERM)
	must("signal", err)
	_, err = c.Wait(ctx, sleeper.ID, client.WaitTree)
	must("wait", err)
	echo, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2"}})
	must("start", err)
	rd, err := c.Logs(ctx, echo.ID, client.LogOptions{Follow: true})
	must("logs", err)
	_, _ = io.Copy(io.Discard, rd)
	rd.Close()
	long, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sleep", "60"}})
	must("start", err)
	_, err = c.StopCommand(ctx, long.ID, client.StopOptions{Grace: time.Second})
	must("stop command", err)
	_, err = c.Command(ctx, echo.ID)
	must("command", err)
	_, err = c.Commands(ctx, api.CommandFilter{Env: env.ID})
	must("commands", err)
	_, err = c.Envs(ctx, api.EnvFilter{})
	must("envs", err)
	_, err = c.Env(ctx, env.ID)
	must("env", err)
	// Files in and out, inside the view; a watch that has begun.
	must("mkdir", c.Mkdir(ctx, env.ID, target+"/d", 0o755))
	_, err = c.WriteFile(ctx, env.ID, target+"/d/f.txt", strings.NewReader("hello\n"), 0o644)
	must("write file", err)
	rf, err := c.ReadFile(ctx, env.ID, target+"/d/f.txt")
	must("read file", err)
	_, _ = io.Copy(io.Discard, rf)
	rf.Close()
	_, err = c.Stat(ctx, env.ID, target+"/d/f.txt")
	must("stat", err)
	_, err = c.ReadDir(ctx, env.ID, target, 2)
	must("read dir", err)
	wctx, wcancel := context.WithCancel(ctx)
	for ev, err := range c.Watch(wctx, env.ID, target, true) {
		must("watch", err)
		if ev.Op == "ready" {
			break
		}
	}
	wcancel()
	_, err = c.Extend(ctx, env.ID, api.DeadlineRequest{TTL: api.Duration(10 * time.Minute)})
	must("extend", err)
	// A session: attach (the upgrade), input and resize.
	tty, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"cat"}, TTY: true})
	must("start tty", err)
	sess, err := c.Attach(ctx, tty.ID, client.AttachOptions{})
	must("attach", err)
	must("send", c.Send(ctx, tty.ID, []byte("hi\n")))
	must("resize", c.Resize(ctx, tty.ID, 100, 30))
	sess.Close()
	kids, err := c.Fork(ctx, env.ID, client.ForkRequest{Count: 1, TTL: api.Duration(time.Minute)})
	must("fork", err)
	for _, k := range kids {
		t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), k.ID, client.StopOptions{}) })
	}
	_, err = c.StopEnv(ctx, env.ID, client.StopOptions{Grace: time.Second})
	must("stop env", err)
	_, err = c.Export(ctx, env.ID, "work", filepath.Join(e.Dir, "export"))
	must("export", err)

	run, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}},
		Command: client.CommandRequest{Argv: []string{"true"}}})
	must("run", err)
	_, err = c.Wait(ctx, run.Commands[0].ID, client.WaitTree)
	must("wait", err)
	for ev, err := range c.Events(ctx, 0, false) {
		must("events", err)
		_ = ev
	}

	_, err = c.Capacity(ctx)
	must("capacity", err)
	must("pause", c.Pause(ctx))
	must("resume", c.Resume(ctx))
	_, err = c.Reap(ctx)
	must("reap", err)
	_, err = c.Usage(ctx)
	must("usage", err)
	_, err = c.BtrfsSizes(ctx)
	must("usage btrfs", err)
	zero := api.Duration(0)
	_, err = c.GC(ctx, client.GCRequest{DryRun: true, RetainTrees: &zero, RetainEvidence: &zero})
	must("gc", err)
	base := filepath.Join(e.Dir, "base")
	must("mkdir", os.Mkdir(base, 0o755))
	_, err = c.AddBaseline(ctx, "b1", base)
	must("add baseline", err)
	_, err = c.Baselines(ctx)
	must("baselines", err)
	must("remove baseline", c.RemoveBaseline(ctx, "b1"))
	_, err = c.Doctor(ctx)
	must("doctor", err)

	// Errors are checked against the document too.
	if _, err := c.Env(ctx, "zzzzzzzz"); err == nil {
		t.Fatal("an unknown id answered")
	}
	if _, err := c.CreateEnv(ctx, map[string]any{"bogus": 1}); err == nil {
		t.Fatal("a bad spec answered")
	}

	if missing := v.unanswered(); len(missing) > 0 {
		t.Errorf("operations no validated success answered (call them above): %s", strings.Join(missing, ", "))
	}
}
