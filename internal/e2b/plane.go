package e2b

// The control plane: the REST calls of E2B's SDKs that make, list, time,
// pause, resume and kill sandboxes (docs/e2b.md has the mapping). A
// sandbox is a hostfork environment labelled e2b.sandbox=<id>; pausing it
// stops its processes and keeps its trees, and connecting to a paused
// sandbox forks its stopped environment into a new one under the same id
// (decision 137).

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/atomicfile"
	"github.com/habemus-papadum/hostfork/spec"
)

// More labels of a sandbox's environment.
const (
	// LabelAutoPause marks a sandbox whose deadline pauses it (the SDK's
	// lifecycle.onTimeout "pause") instead of killing it.
	LabelAutoPause = "e2b.autopause"
)

// Plane limits and defaults.
const (
	// DefaultTimeout is a sandbox's lifetime when create gives none (the
	// SDKs' default too).
	DefaultTimeout = 300 * time.Second
	// maxBody bounds a control-plane request's body.
	maxBody = 1 << 20
	// maxMetaValue bounds one metadata value (a label's value).
	maxMetaValue = 512
	// maxListLimit is the largest page GET /v2/sandboxes answers.
	maxListLimit = 100
	// BaseTemplate is the built-in template.
	BaseTemplate = "base"
	// stateDir holds one file per paused or killed sandbox whose state
	// its environments' records can't tell (under the store).
	stateDir = "e2b/state"
)

// Sandbox states (the SDK's).
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// plane is the control plane's state: the id → environment cache that
// makes an envd request's lookup one record read, and a lock per sandbox
// that orders its state changes.
type plane struct {
	mu    sync.Mutex
	live  map[string]string // sandbox id → its active environment's id
	locks map[string]*sandboxLock
}

type sandboxLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes sandbox id's lock; the returned func releases it.
func (p *plane) lock(id string) func() {
	p.mu.Lock()
	l := p.locks[id]
	if l == nil {
		l = &sandboxLock{}
		p.locks[id] = l
	}
	l.refs++
	p.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.locks, id)
		}
		p.mu.Unlock()
	}
}

func (p *plane) cached(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live[id]
}

func (p *plane) remember(id, envID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if envID == "" {
		delete(p.live, id)
	} else {
		p.live[id] = envID
	}
}

// planeRoutes registers the control plane.
func (s *Server) planeRoutes() {
	s.pl = &plane{live: map[string]string{}, locks: map[string]*sandboxLock{}}
	m := s.plane
	m.Handle("POST /v2/sandboxes", s.authed(s.create))
	m.Handle("POST /sandboxes", s.authed(s.create))
	m.Handle("GET /v2/sandboxes", s.authed(func(w http.ResponseWriter, r *http.Request, k Key) error { return s.list(w, r, k, true) }))
	m.Handle("GET /sandboxes", s.authed(func(w http.ResponseWriter, r *http.Request, k Key) error { return s.list(w, r, k, false) }))
	m.Handle("GET /sandboxes/{id}", s.authed(s.get))
	m.Handle("DELETE /sandboxes/{id}", s.authed(s.kill))
	m.Handle("POST /sandboxes/{id}/timeout", s.authed(s.setTimeout))
	m.Handle("POST /sandboxes/{id}/pause", s.authed(s.pause))
	m.Handle("POST /v2/sandboxes/{id}/connect", s.authed(s.connect))
	m.Handle("POST /sandboxes/{id}/connect", s.authed(s.connect))
	m.Handle("POST /sandboxes/{id}/resume", s.authed(s.connect))
	refused := map[string]string{
		"PUT /sandboxes/{id}/network":    "network policy: a hostfork sandbox shares the host's network",
		"GET /sandboxes/{id}/metrics":    "sandbox metrics: use 'hostfork status' or the hostfork API's /metrics",
		"POST /sandboxes/{id}/snapshots": "snapshots: memory is never kept; pause keeps the files",
		"GET /snapshots":                 "snapshots: memory is never kept; pause keeps the files",
		"POST /sandboxes/{id}/fork":      "forking through this API",
		"/volumes/":                      "volumes: give the template's spec a tree instead",
		"/volumes":                       "volumes: give the template's spec a tree instead",
		"/volumecontent/":                "volumes: give the template's spec a tree instead",
		"/secrets":                       "secrets",
		"/secrets/":                      "secrets",
		"/templates/":                    "template builds: write a hostfork spec file NAME.yaml in the --e2b-templates directory",
		"/v2/templates/":                 "template builds: write a hostfork spec file NAME.yaml in the --e2b-templates directory",
		"/v3/templates":                  "template builds: write a hostfork spec file NAME.yaml in the --e2b-templates directory",
	}
	for pat, what := range refused {
		m.Handle(pat, s.authed(func(w http.ResponseWriter, r *http.Request, _ Key) error {
			return fmt.Errorf("%s: not supported by hostfork's E2B-compatible API (docs/e2b.md, \"Refused\"): %w", what, errRefused)
		}))
	}
	m.Handle("/", s.authed(func(w http.ResponseWriter, r *http.Request, _ Key) error {
		return fmt.Errorf("%s %s is not part of hostfork's E2B-compatible API (docs/e2b.md): %w", r.Method, r.URL.Path, api.ErrNotFound)
	}))
}

// errRefused marks what the front refuses by design (501); errState a
// call the sandbox's state forbids now (409).
var (
	errRefused = errors.New("not implemented")
	errState   = errors.New("conflict")
)

// authed checks the API key (401 without a valid one, before anything
// else is looked at) and maps the handler's error to {code, message}.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, Key) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, ok := s.key(r)
		if !ok {
			fail(w, http.StatusUnauthorized, "a missing or unknown X-API-KEY: give one of the keys of the server's --e2b-keys file (E2B_API_KEY)")
			return
		}
		if err := h(w, r, k); err != nil {
			status := planeStatus(err)
			if status == http.StatusInternalServerError {
				s.cfg.Logf("e2b: %s %s (key %s): %v", r.Method, r.URL.Path, k.Name, err)
			}
			fail(w, status, "%s", err.Error())
		}
	})
}

// planeStatus is the HTTP status of a handler's error.
func planeStatus(err error) int {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errRefused):
		return http.StatusNotImplemented
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errState), errors.Is(err, api.ErrConflict), errors.Is(err, api.ErrEnvNotActive):
		return http.StatusConflict
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrUnsupported), errors.Is(err, api.ErrAmbiguous):
		return http.StatusBadRequest
	case errors.Is(err, api.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, api.ErrAdmissionRefused), errors.Is(err, api.ErrStoreFull):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...)
}

// decode reads a JSON body of at most maxBody bytes into v; an empty body
// leaves v as it is.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid("the request body is not the JSON expected: %v", err)
	}
	return nil
}

// present says whether an optional JSON field asks for something: absent,
// null, false, {} and [] ask for nothing.
func present(m json.RawMessage) bool {
	switch strings.TrimSpace(string(m)) {
	case "", "null", "false", "{}", "[]":
		return false
	}
	return true
}

// newSandboxRequest is the body of POST /v2/sandboxes (and the older
// POST /sandboxes).
type newSandboxRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	Secure              *bool             `json:"secure"`
}

// refusals names what the request asks for that a hostfork sandbox can't
// be; "" when nothing.
func (q *newSandboxRequest) refusals() error {
	var ar struct {
		Enabled bool `json:"enabled"`
	}
	var why []string
	for _, r := range []struct {
		asked bool
		what  string
	}{
		{q.AllowInternetAccess != nil && !*q.AllowInternetAccess, "allowInternetAccess false (a hostfork sandbox shares the host's network; there is no network policy)"},
		{present(q.Network), "network rules (a hostfork sandbox shares the host's network; there is no network policy)"},
		{present(q.VolumeMounts), "volume mounts (give the template's spec a tree instead)"},
		{present(q.MCP), "an MCP gateway (run 'hostfork mcp' instead)"},
		{present(q.IAM), "IAM tokens"},
		{q.AutoPauseMemory != nil && *q.AutoPauseMemory, "keepMemory on pause (memory is never kept: a paused sandbox keeps its files only)"},
		{present(q.AutoResume) && (json.Unmarshal(q.AutoResume, &ar) != nil || ar.Enabled), "autoResume (resume a paused sandbox with Sandbox.connect)"},
	} {
		if r.asked {
			why = append(why, r.what)
		}
	}
	if len(why) > 0 {
		return invalid("hostfork's E2B-compatible API can't give %s; drop it (docs/e2b.md, \"Refused\")", strings.Join(why, "; "))
	}
	return nil
}

// sandboxAnswer is what create and connect answer.
type sandboxAnswer struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	// MemoryKept is false on every answer: a resumed sandbox's processes
	// started afresh (hostfork's own field; the SDKs ignore it).
	MemoryKept bool `json:"memoryKept"`
}

// hdrMemoryKept answers pause and connect: "false", always.
const hdrMemoryKept = "X-Hostfork-Memory-Kept"

// clientID is the legacy client id the API answers (the SDKs ignore it).
const clientID = "hostfork"

func (s *Server) answer(id, template string) sandboxAnswer {
	return sandboxAnswer{SandboxID: id, TemplateID: template, Alias: template, ClientID: clientID, EnvdVersion: EnvdVersion, EnvdAccessToken: s.Token(id)}
}

// timeoutOf turns the request's seconds into a lifetime (default 300 s).
func timeoutOf(sec *int64) (time.Duration, error) {
	if sec == nil || *sec == 0 {
		return DefaultTimeout, nil
	}
	if *sec < 0 || *sec > 366*24*3600 {
		return 0, invalid("timeout %d: give a number of seconds from 1 to 31622400", *sec)
	}
	d := time.Duration(*sec) * time.Second
	if d <= spec.DefaultGrace {
		return 0, invalid("timeout %d s: give more than %v (a sandbox's stop includes a %v grace)", *sec, spec.DefaultGrace, spec.DefaultGrace)
	}
	return d, nil
}

// metaLabels turns the SDK's metadata into labels, refusing what can't be
// one.
func metaLabels(meta map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range meta {
		lk := LabelMeta + k
		if !spec.ValidLabelKey(lk) || !spec.ValidLabelKey(k) {
			return nil, invalid("metadata key %q: a hostfork label holds it (%s<key>), so use ASCII letters, digits, '.', '_', '-', '/', starting with a letter or digit, at most %d characters", k, LabelMeta, 63-len(LabelMeta))
		}
		if len(v) > maxMetaValue || !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\n\r") {
			return nil, invalid("metadata %q: its value must be UTF-8 without NUL or newlines, at most %d bytes", k, maxMetaValue)
		}
		out[lk] = v
	}
	return out, nil
}

// newID makes a sandbox id: 20 characters of [a-z0-9].
func newID() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b), nil
}

// validID says whether id can be a sandbox id (what newID makes, give or
// take): anything else is no sandbox.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// baseShares are the paths the base template shares back: the store and
// this executable (the paths hostfork needs inside a view) when the agent
// profile's scratch directories or home overlay would hide them.
func baseShares(root string) []string {
	covered := []string{"/tmp", "/var/tmp", "/dev/shm"}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		covered = append(covered, home)
	}
	paths := []string{root}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			paths = append(paths, r)
		}
	}
	var out []string
	for _, p := range paths {
		for _, c := range covered {
			if p == c || strings.HasPrefix(p, c+"/") {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// templateName says whether name can name a template file.
func templateName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// template is the spec template name names: "base", or DIR/NAME.yaml.
func (s *Server) template(name string) (*spec.Environment, error) {
	if name == BaseTemplate {
		// The agent profile (private home overlay, scratch /tmp, the rest
		// read-only), a clean launch environment (not the server's), and
		// the store shared (hostfork needs it inside the view, also when
		// it lies under /tmp or the home directory).
		return &spec.Environment{
			Profile: spec.ProfileAgent,
			View:    spec.View{Share: baseShares(s.h.Root())},
			Launch:  spec.Launch{EnvPolicy: spec.EnvClean},
		}, nil
	}
	if !templateName(name) {
		return nil, invalid("template %q: a template's name is letters, digits, '_' and '-' (the file NAME.yaml in the server's --e2b-templates directory)", name)
	}
	if s.cfg.Templates == "" {
		return nil, fmt.Errorf("template %q not found: this server has only the built-in %q (start it with --e2b-templates DIR holding NAME.yaml spec files): %w", name, BaseTemplate, api.ErrNotFound)
	}
	path := filepath.Join(s.cfg.Templates, name+".yaml")
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template %q not found: no %s (templates are hostfork spec files NAME.yaml; %q is built in): %w", name, path, BaseTemplate, api.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", name, err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("template %q: %s is larger than %d bytes: %w", name, path, maxBody, api.ErrInvalid)
	}
	sp, err := spec.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("template %q (%s): %w", name, path, err)
	}
	return sp, nil
}

// create makes a sandbox: the template's spec, bounded by the timeout and
// detached (it outlives the server), labelled with its id, key, template
// and metadata.
func (s *Server) create(w http.ResponseWriter, r *http.Request, k Key) error {
	var q newSandboxRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	if err := q.refusals(); err != nil {
		return err
	}
	q.TemplateID = cmp.Or(q.TemplateID, BaseTemplate)
	ttl, err := timeoutOf(q.Timeout)
	if err != nil {
		return err
	}
	labels, err := metaLabels(q.Metadata)
	if err != nil {
		return err
	}
	for name := range q.EnvVars {
		if !spec.ValidEnvName(name) {
			return invalid("envVars: %q can't be an environment variable's name", name)
		}
	}
	sp, err := s.template(q.TemplateID)
	if err != nil {
		return err
	}
	id, err := newID()
	if err != nil {
		return err
	}
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	// The front's own labels are its to set.
	maps.DeleteFunc(sp.Labels, func(k, _ string) bool { return strings.HasPrefix(k, "e2b.") })
	maps.Copy(sp.Labels, labels)
	sp.Labels[LabelSandbox], sp.Labels[LabelKey], sp.Labels[LabelTmpl] = id, k.Name, q.TemplateID
	if q.AutoPause != nil && *q.AutoPause {
		sp.Labels[LabelAutoPause] = "true"
	}
	if sp.Purpose == "" {
		sp.Purpose = "e2b sandbox " + id
	}
	if len(q.EnvVars) > 0 {
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		maps.Copy(sp.Env, q.EnvVars)
	}
	sp.Lifetime.MaxRuntime, sp.Lifetime.UntilStopped = spec.Duration(ttl), false
	sp.Lifetime.OwnerExit = spec.OwnerExitDetach
	if err := sp.Validate(); err != nil {
		return fmt.Errorf("template %q: %w", q.TemplateID, err)
	}
	ctx := r.Context()
	p, err := s.h.Plan(ctx, *sp)
	if err != nil {
		return fmt.Errorf("template %q: %w", q.TemplateID, err)
	}
	env, err := s.h.Create(ctx, p)
	if err != nil {
		return fmt.Errorf("template %q: %w", q.TemplateID, err)
	}
	s.pl.remember(id, env.ID())
	writeJSON(w, http.StatusCreated, s.answer(id, q.TemplateID))
	return nil
}

// sandbox is one sandbox as its environments' records show it.
type sandbox struct {
	ID, Key, Template string
	State             string // running | paused
	Env               hostfork.EnvRecord
	// Gone: killed, timed out without autoPause, or never made.
	Gone bool
}

// stateFile is sandbox id's state file ("paused" or "killed"), which
// says what its stopped environment's record can't.
func (s *Server) stateFile(id string) string {
	return filepath.Join(s.h.Root(), stateDir, id)
}

func (s *Server) readState(id string) string {
	b, err := os.ReadFile(s.stateFile(id))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (s *Server) writeState(id, state string) error {
	if state == "" {
		if err := os.Remove(s.stateFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.stateFile(id)), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(s.stateFile(id), []byte(state+"\n"), 0o600)
}

// summarize reads a sandbox from its environments' records (all one id's):
// the newest that did not fail to start is its current one; running while
// that is not final, paused if it was paused (or its deadline paused it),
// gone otherwise.
func (s *Server) summarize(id string, recs []hostfork.EnvRecord) sandbox {
	sort.Slice(recs, func(i, j int) bool { return recs[i].CreatedAt.Before(recs[j].CreatedAt) })
	sb := sandbox{ID: id, Gone: true}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].State != api.EnvFailed {
			sb.Env = recs[i]
			break
		}
	}
	if sb.Env.ID == "" {
		return sb
	}
	sb.Key, sb.Template = sb.Env.Labels[LabelKey], sb.Env.Labels[LabelTmpl]
	if !sb.Env.State.Final() {
		sb.State, sb.Gone = stateRunning, false
		return sb
	}
	switch s.readState(id) {
	case statePaused:
		sb.State, sb.Gone = statePaused, false
	case "":
		if sb.Env.StopReason == api.ReasonDeadline && sb.Env.Labels[LabelAutoPause] == "true" {
			sb.State, sb.Gone = statePaused, false
		}
	}
	return sb
}

// sandboxes reads every sandbox of key k.
func (s *Server) sandboxes(ctx context.Context, k Key) ([]sandbox, error) {
	recs, err := s.h.Envs(ctx, hostfork.EnvFilter{Labels: api.Selector{LabelKey + "=" + k.Name}})
	if err != nil {
		return nil, err
	}
	byID := map[string][]hostfork.EnvRecord{}
	for _, r := range recs {
		if id := r.Labels[LabelSandbox]; id != "" {
			byID[id] = append(byID[id], r)
		}
	}
	var out []sandbox
	for id, rs := range byID {
		if sb := s.summarize(id, rs); !sb.Gone {
			out = append(out, sb)
		}
	}
	return out, nil
}

// lookup reads sandbox id for key k: another key's sandbox, like a gone
// one, is not found.
func (s *Server) lookup(ctx context.Context, k Key, id string) (sandbox, error) {
	notFound := fmt.Errorf("sandbox %q not found (it was killed, its timeout ended, or another API key made it): %w", id, api.ErrNotFound)
	if !validID(id) {
		return sandbox{}, notFound
	}
	var sb sandbox
	// The cached environment, while it is not final, is the current one
	// (create and connect remember the newest): one record read instead
	// of a scan of the labels.
	if envID := s.pl.cached(id); envID != "" {
		if env, err := s.h.OpenEnv(ctx, envID); err == nil && !env.Record().State.Final() {
			sb = s.summarize(id, []hostfork.EnvRecord{env.Record()})
		}
	}
	if sb.ID == "" {
		recs, err := s.h.Envs(ctx, hostfork.EnvFilter{Labels: api.Selector{LabelSandbox + "=" + id}})
		if err != nil {
			return sandbox{}, err
		}
		sb = s.summarize(id, recs)
	}
	if sb.Gone || sb.Key != k.Name {
		return sandbox{}, notFound
	}
	return sb, nil
}

// sandboxInfo is one sandbox as GET /sandboxes/{id} and the lists show it.
type sandboxInfo struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int               `json:"diskSizeMB"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	Metadata        map[string]string `json:"metadata"`
	// EnvID is the hostfork environment now behind the sandbox (hostfork's
	// own field).
	EnvID string `json:"envID"`
}

func (s *Server) info(sb sandbox, withToken bool) sandboxInfo {
	e := sb.Env
	in := sandboxInfo{
		SandboxID: sb.ID, TemplateID: sb.Template, Alias: sb.Template, ClientID: clientID,
		StartedAt: e.CreatedAt, State: sb.State, CPUCount: runtime.NumCPU(),
		EnvdVersion: EnvdVersion, Metadata: map[string]string{}, EnvID: e.ID,
	}
	if e.ActivatedAt != nil {
		in.StartedAt = *e.ActivatedAt
	}
	switch {
	case sb.State == statePaused && e.StoppedAt != nil:
		in.EndAt = *e.StoppedAt
	case e.DeadlineAt != nil:
		in.EndAt = *e.DeadlineAt
	}
	if withToken {
		in.EnvdAccessToken = s.Token(sb.ID)
	}
	for k, v := range e.Labels {
		if mk, ok := strings.CutPrefix(k, LabelMeta); ok {
			in.Metadata[mk] = v
		}
	}
	return in
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, k Key) error {
	sb, err := s.lookup(r.Context(), k, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.info(sb, true))
	return nil
}

// metaFilter parses the list's metadata query: "k=v&k2=v2" as the SDKs
// encode it (URL-encoded pairs, each part encoded once more).
func metaFilter(q string) (map[string]string, error) {
	if q == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return nil, invalid("metadata filter %q: write key=value pairs joined by '&', URL-encoded", q)
	}
	out := map[string]string{}
	for k, vs := range vals {
		if len(vs) != 1 {
			return nil, invalid("metadata filter: key %q appears %d times", k, len(vs))
		}
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(vs[0])
		if err1 != nil || err2 != nil {
			return nil, invalid("metadata filter %q: bad URL encoding", q)
		}
		out[dk] = dv
	}
	return out, nil
}

// pageToken is a list's position: the last sandbox's start and id.
func pageToken(sb sandboxInfo) string {
	return base64.RawURLEncoding.EncodeToString([]byte(sb.StartedAt.UTC().Format(time.RFC3339Nano) + " " + sb.SandboxID))
}

// pageAfter returns the sandboxes of out (sorted as list sorts them) that
// come after the one page token tok names. When that sandbox is gone, the
// page resumes after the position the token records.
func pageAfter(out []sandboxInfo, tok string, asc bool) ([]sandboxInfo, error) {
	if tok == "" {
		return out, nil
	}
	if i := slices.IndexFunc(out, func(a sandboxInfo) bool { return pageToken(a) == tok }); i >= 0 {
		return out[i+1:], nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	at, id, ok := strings.Cut(string(b), " ")
	t, terr := time.Parse(time.RFC3339Nano, at)
	if err != nil || !ok || terr != nil {
		return nil, invalid("nextToken %q: give the x-next-token header of the previous page", tok)
	}
	after := func(a sandboxInfo) bool {
		return a.StartedAt.Before(t) != asc && !a.StartedAt.Equal(t) || a.StartedAt.Equal(t) && a.SandboxID > id
	}
	if i := slices.IndexFunc(out, after); i >= 0 {
		return out[i:], nil
	}
	return out[len(out):], nil
}

// list answers the caller key's sandboxes, filtered; newest first unless
// order=asc. v1 (GET /sandboxes) lists running sandboxes without paging.
func (s *Server) list(w http.ResponseWriter, r *http.Request, k Key, v2 bool) error {
	q := r.URL.Query()
	meta, err := metaFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case stateRunning, statePaused:
				states[st] = true
			case "":
			default:
				return invalid("state %q: use running or paused", st)
			}
		}
	}
	if !v2 {
		states = map[string]bool{stateRunning: true}
	}
	limit := maxListLimit
	if l := q.Get("limit"); l != "" && v2 {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			return invalid("limit %q: give 1 to %d", l, maxListLimit)
		}
		limit = n
	}
	asc := false
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		asc = true
	default:
		return invalid("order %q: use asc or desc", q.Get("order"))
	}
	sbs, err := s.sandboxes(r.Context(), k)
	if err != nil {
		return err
	}
	out := []sandboxInfo{}
	for _, sb := range sbs {
		if len(states) > 0 && !states[sb.State] {
			continue
		}
		if t := q.Get("template"); t != "" && sb.Template != t {
			continue
		}
		in := s.info(sb, false)
		ok := true
		for mk, mv := range meta {
			if got, has := in.Metadata[mk]; !has || got != mv {
				ok = false
			}
		}
		if ok {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.After(b.StartedAt) != asc
		}
		return a.SandboxID < b.SandboxID
	})
	if !v2 {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	if out, err = pageAfter(out, q.Get("nextToken"), asc); err != nil {
		return err
	}
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", pageToken(out[limit-1]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// stopCurrent stops sandbox sb's environment if it runs.
func (s *Server) stopCurrent(ctx context.Context, sb sandbox) error {
	s.pl.remember(sb.ID, "")
	if sb.State != stateRunning {
		return nil
	}
	_, err := s.h.StopEnv(ctx, sb.Env.ID, hostfork.StopOptions{Reason: api.ReasonUser})
	return err
}

// kill stops the sandbox; its trees stay until the store's retention.
func (s *Server) kill(w http.ResponseWriter, r *http.Request, k Key) error {
	id := r.PathValue("id")
	defer s.pl.lock(id)()
	sb, err := s.lookup(r.Context(), k, id)
	if err != nil {
		return err
	}
	// "killed" is written first: a crash before the stop leaves a
	// sandbox running (its active environment wins) or killed, never
	// paused. Once the stop is recorded (reason user) the file is needed
	// only by a sandbox its deadline paused (decision 136). A running
	// sandbox without autoPause needs no mark (whichever stop wins, user
	// or deadline, leaves it gone): a stale "paused" (a pause that
	// crashed before its stop) is removed, and no file is written
	// (decision 150).
	mark := "killed"
	if sb.State == stateRunning && sb.Env.Labels[LabelAutoPause] != "true" {
		mark = ""
	}
	if err := s.writeState(id, mark); err != nil {
		return err
	}
	if err := s.stopCurrent(r.Context(), sb); err != nil {
		return err
	}
	if mark != "" && !(sb.State == statePaused && sb.Env.StopReason == api.ReasonDeadline && sb.Env.Labels[LabelAutoPause] == "true") {
		if err := s.writeState(id, ""); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause stops the sandbox's processes and keeps its trees (409 when it is
// paused already).
func (s *Server) pause(w http.ResponseWriter, r *http.Request, k Key) error {
	// The body's memory flag is not refused: SDKs before 2.46 send
	// memory: true by default, so it can't tell a choice. Memory is never
	// kept, and the answer's header says so (decision 137).
	var q struct {
		Memory *bool `json:"memory"`
	}
	if err := decode(w, r, &q); err != nil {
		return err
	}
	id := r.PathValue("id")
	defer s.pl.lock(id)()
	sb, err := s.lookup(r.Context(), k, id)
	if err != nil {
		return err
	}
	if sb.State == statePaused {
		return fmt.Errorf("sandbox %s is paused already: %w", id, errState)
	}
	if err := s.writeState(id, statePaused); err != nil {
		return err
	}
	w.Header().Set(hdrMemoryKept, "false")
	if err := s.stopCurrent(r.Context(), sb); err != nil {
		if rec, _, serr := s.h.Status(r.Context(), sb.Env.ID); serr == nil && !rec.State.Final() {
			_ = s.writeState(id, "") // still running: not paused
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout moves the sandbox's deadline to now + timeout seconds.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, k Key) error {
	var q struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(w, r, &q); err != nil {
		return err
	}
	if q.Timeout == nil {
		return invalid("give timeout, the seconds from now the sandbox may live")
	}
	ttl, err := timeoutOf(q.Timeout)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	defer s.pl.lock(id)()
	sb, err := s.lookup(r.Context(), k, id)
	if err != nil {
		return err
	}
	if sb.State != stateRunning {
		return fmt.Errorf("sandbox %s is paused: resume it with Sandbox.connect (which takes a timeout): %w", id, errState)
	}
	if _, err := s.h.Extend(r.Context(), sb.Env.ID, hostfork.ExtendOptions{TTL: api.Duration(ttl)}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect answers a running sandbox's token (moving its deadline later
// when the timeout asks for it), or resumes a paused one: its stopped
// environment is forked into a new one, same trees, same id, processes
// started afresh (201).
func (s *Server) connect(w http.ResponseWriter, r *http.Request, k Key) error {
	var q struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := decode(w, r, &q); err != nil {
		return err
	}
	if q.Memory != nil && *q.Memory {
		return invalid("memory: memory is never kept: a resumed sandbox keeps its files only")
	}
	ttl, err := timeoutOf(q.Timeout)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	defer s.pl.lock(id)()
	ctx := r.Context()
	sb, err := s.lookup(ctx, k, id)
	if err != nil {
		return err
	}
	if sb.State == stateRunning {
		if q.Timeout != nil && (sb.Env.DeadlineAt == nil || sb.Env.DeadlineAt.Before(time.Now().Add(ttl))) {
			if _, err := s.h.Extend(ctx, sb.Env.ID, hostfork.ExtendOptions{TTL: api.Duration(ttl)}); err != nil {
				return err
			}
		}
		writeJSON(w, http.StatusOK, s.answer(id, sb.Template))
		return nil
	}
	w.Header().Set(hdrMemoryKept, "false")
	recs, err := s.h.Fork(ctx, sb.Env.ID, hostfork.ForkOptions{Count: 1, TTL: ttl, OwnerExit: spec.OwnerExitDetach})
	if err != nil {
		for _, rec := range recs {
			_, _ = s.h.StopEnv(context.WithoutCancel(ctx), rec.ID, hostfork.StopOptions{})
		}
		return fmt.Errorf("resuming sandbox %s (a fork of its environment %s): %w", id, sb.Env.ID, err)
	}
	if err := s.writeState(id, ""); err != nil {
		return err
	}
	s.pl.remember(id, recs[0].ID)
	writeJSON(w, http.StatusCreated, s.answer(id, sb.Template))
	return nil
}

// liveEnvCached opens sandbox id's active environment from the cache,
// falling back to the records (and remembering what they say).
func (s *Server) liveEnvCached(ctx context.Context, id string) (*hostfork.Env, error) {
	if !validID(id) {
		return nil, errNoSandbox
	}
	if envID := s.pl.cached(id); envID != "" {
		env, err := s.h.OpenEnv(ctx, envID)
		if err == nil {
			if rec := env.Record(); !rec.State.Final() && rec.State != api.EnvStopping && !rec.Expired {
				return env, nil
			}
		}
		s.pl.remember(id, "")
	}
	recs, err := s.h.Envs(ctx, hostfork.EnvFilter{Labels: api.Selector{LabelSandbox + "=" + id}, Active: true})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, errNoSandbox
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].CreatedAt.Before(recs[j].CreatedAt) })
	env, err := s.h.OpenEnv(ctx, recs[len(recs)-1].ID)
	if err != nil {
		return nil, err
	}
	s.pl.remember(id, env.ID())
	return env, nil
}
