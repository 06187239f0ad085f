package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
)

func newTestServer(t *testing.T) *Server {
	t.Helper()
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(t.TempDir(), "store")})
	if err != nil {
		t.Fatalf("opening a store: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	s, err := New(Config{Host: h, OwnerUID: 12345})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpenAPIMatchesRoutes: every route the mux serves is in the document,
// and every operation of the document is routed to exactly that pattern.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := newTestServer(t)
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %s", rec.Code, rec.Body)
	}
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas   map[string]json.RawMessage `json:"schemas"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			pattern := strings.ToUpper(m) + " " + p
			documented[pattern] = true
			r := httptest.NewRequest(strings.ToUpper(m), strings.ReplaceAll(p, "{id}", "abc123"), nil)
			if _, got := s.mux.Handler(r); got != pattern {
				t.Errorf("documented %s is routed to %q", pattern, got)
			}
		}
	}
	var routed []string
	for _, rt := range s.routes {
		pattern := rt.method + " " + rt.path
		routed = append(routed, pattern)
		if !documented[pattern] {
			t.Errorf("route %s is not in the OpenAPI document", pattern)
		}
	}
	if len(routed) != len(documented) {
		sort.Strings(routed)
		t.Errorf("%d routes, %d documented operations: %v", len(routed), len(documented), routed)
	}
	for _, name := range []string{"api.Env", "api.Command", "api.Event", "spec.Environment", "client.CommandRequest", "client.ErrorBody"} {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("no schema %s", name)
		}
	}
	// Every $ref points at a schema that exists.
	for _, ref := range refs(rec.Body.String()) {
		name, isSchema := strings.CutPrefix(ref, "#/components/schemas/")
		if isSchema && doc.Components.Schemas[name] == nil || !isSchema && doc.Components.Responses[strings.TrimPrefix(ref, "#/components/responses/")] == nil {
			t.Errorf("dangling $ref %s", ref)
		}
	}
}

func refs(doc string) []string {
	var out []string
	for _, part := range strings.Split(doc, `"$ref":"`)[1:] {
		out = append(out, part[:strings.IndexByte(part, '"')])
	}
	return out
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", api.ErrNotFound), 404},
		{fmt.Errorf("x: %w", api.ErrAmbiguous), 409},
		{fmt.Errorf("x: %w", api.ErrConflict), 409},
		{fmt.Errorf("x: %w", api.ErrExists), 409},
		{fmt.Errorf("x: %w", api.ErrEnvNotActive), 409},
		{fmt.Errorf("x: %w", api.ErrInvalid), 422},
		{fmt.Errorf("x: %w", api.ErrExecutableNotFound), 422},
		{fmt.Errorf("x: %w", api.ErrAdmissionRefused), 429},
		{fmt.Errorf("x: %w", api.ErrStoreFull), 507},
		{fmt.Errorf("x: %w", syscall.ENOSPC), 507},
		{fmt.Errorf("x: %w", api.ErrForbidden), 403},
		{fmt.Errorf("x: %w", api.ErrUnsupported), 501},
		{fmt.Errorf("x: %w", api.ErrClosed), 503},
		{badRequest("bad"), 400},
		{withStatus(413, invalid("big")), 413},
		{fmt.Errorf("other"), 500},
	} {
		if got := statusOf(tc.err); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{`"TERM"`: syscall.SIGTERM, `"SIGKILL"`: syscall.SIGKILL, `"int"`: syscall.SIGINT, `"15"`: syscall.SIGTERM, `9`: syscall.SIGKILL} {
		if got, err := parseSignal(json.RawMessage(in)); err != nil || got != want {
			t.Errorf("parseSignal(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{``, `"NOPE"`, `0`, `65`, `true`} {
		if _, err := parseSignal(json.RawMessage(in)); err == nil {
			t.Errorf("parseSignal(%s) accepted", in)
		}
	}
}

func TestHostChecks(t *testing.T) {
	for h, want := range map[string]bool{"": true, "localhost": true, "unix": true, "localhost:80": false, "evil.example": false, "127.0.0.1": false} {
		if socketHost(h) != want {
			t.Errorf("socketHost(%q) = %v", h, !want)
		}
	}
	for h, want := range map[string]bool{"127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true, "localhost": true, "evil.example:9464": false, "evil.example": false} {
		if metricsHost(h) != want {
			t.Errorf("metricsHost(%q) = %v", h, !want)
		}
	}
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Origin", "null")
	if refuseBrowser(r) == nil {
		t.Error("Origin: null accepted")
	}
}

// TestPeerRefused: the handler refuses a request whose peer credentials
// are missing or another user's, before routing.
func TestPeerRefused(t *testing.T) {
	s := newTestServer(t)
	for _, p := range []peer{{}, {ok: true, uid: 4242}} {
		r := httptest.NewRequest("GET", "/v1/_ping", nil)
		r.Host = "localhost"
		r = r.WithContext(context.WithValue(r.Context(), peerKey{}, p))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `"exit_code"`) || fmt.Sprint(rec.Header()["Hostfork-API-Version"]) != "[1]" {
			t.Errorf("peer %+v: %d %s %v", p, rec.Code, rec.Body, rec.Header())
		}
	}
	r := httptest.NewRequest("GET", "/v1/_ping", nil)
	r.Host = "localhost"
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, peer{ok: true, uid: 12345}))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	if rec.Code != 200 {
		t.Errorf("the owner: %d %s", rec.Code, rec.Body)
	}
}

// failingListener's Accept fails for good, as a listener whose descriptor
// went bad does.
type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) {
	return nil, errors.New("accept: the listener broke")
}

// TestServeNamesTheFrontThatFailed: an error while serving says which
// front it came from (the flag that made it), and the others are shut
// down.
func TestServeNamesTheFrontThatFailed(t *testing.T) {
	s := newTestServer(t)
	api, err := net.Listen("unix", filepath.Join(t.TempDir(), "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Serve(ctx, Listeners{API: api, TCP: []Front{{Name: "--e2b-listen", Listener: failingListener{tcp}, Handler: http.NotFoundHandler()}}})
	if err == nil || !strings.HasPrefix(err.Error(), "--e2b-listen: ") || ctx.Err() != nil {
		t.Fatalf("Serve with a broken front: %v (ctx %v), want an error naming --e2b-listen", err, ctx.Err())
	}
}
