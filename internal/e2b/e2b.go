// Package e2b is hostfork's E2B-compatible front: the control plane's REST
// API and the in-sandbox "envd" API (Connect RPC over HTTP) that E2B's
// SDKs speak, answered on one listener for every sandbox. A sandbox is a
// hostfork environment; this package only calls the library.
//
// Routing: a request carrying E2b-Sandbox-Id is for that sandbox's envd
// (the SDKs send it on every envd call, since E2B_SANDBOX_URL names one
// address for all sandboxes); every other request is the control plane.
//
// Authentication (TCP has no peer credentials): control-plane calls carry
// X-API-KEY, compared in constant time with the keys file's; envd calls
// carry X-Access-Token, the sandbox's own token: an HMAC of its id under
// the server's secret (kept in the store, mode 0600), so it survives a
// restart without being stored anywhere.
package e2b

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/atomicfile"
)

// Labels a sandbox's environment carries.
const (
	LabelSandbox = "e2b.sandbox"  // the sandbox id (kept across pause and connect)
	LabelKey     = "e2b.key"      // the API key's name that made it
	LabelMeta    = "e2b.meta/"    // + a metadata key: the SDK's metadata
	LabelTmpl    = "e2b.template" // the template's name
)

// EnvdVersion is the envd version announced to the SDKs. The SDK gates
// features on it: stdin on 0.3.0, closeStdin on 0.5.2, octet-stream
// uploads on 0.5.7, metadata on 0.6.2.
const EnvdVersion = "0.6.2"

// Headers of the protocol.
const (
	hdrSandboxID   = "E2b-Sandbox-Id"
	hdrAPIKey      = "X-Api-Key"
	hdrAccessToken = "X-Access-Token"
)

// Key is one API key: its name (labels, logs) and its secret.
type Key struct {
	Name   string
	secret []byte
}

// Config configures a Server.
type Config struct {
	// Host is the open store; the front only calls it.
	Host *hostfork.Host
	// Keys are the accepted API keys (LoadKeys).
	Keys []Key
	// Templates is the directory of spec templates NAME.yaml; "" has only
	// the built-in "base".
	Templates string
	// Secret derives each sandbox's access token (LoadSecret).
	Secret []byte
	// Logf reports what the front can't answer to anyone; nil discards.
	Logf func(format string, args ...any)
	// MaxUpload bounds one file envd's POST /files takes, in bytes (0:
	// DefaultMaxUpload); a larger upload is refused with 413 and leaves
	// nothing behind.
	MaxUpload int64
}

// Server answers the E2B-compatible protocol over one Host.
type Server struct {
	cfg   Config
	h     *hostfork.Host
	plane *http.ServeMux // the control plane
	envd  *http.ServeMux // a sandbox's envd (after its token is checked)
	pl    *plane         // the control plane's cache and locks (plane.go)
}

// New builds the front.
func New(cfg Config) (*Server, error) {
	if cfg.Host == nil {
		return nil, errors.New("e2b: no Host")
	}
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("e2b: no API keys: give --e2b-keys a file with one 'NAME KEY' per line: %w", api.ErrInvalid)
	}
	if len(cfg.Secret) < 32 {
		return nil, fmt.Errorf("e2b: the token secret is shorter than 32 bytes: %w", api.ErrInvalid)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &Server{cfg: cfg, h: cfg.Host, plane: http.NewServeMux(), envd: http.NewServeMux()}
	s.routes()
	return s, nil
}

// ServeHTTP sends a request to its sandbox's envd or to the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(hdrSandboxID) != "" {
		s.envd.ServeHTTP(w, r)
		return
	}
	s.plane.ServeHTTP(w, r)
}

// routes registers both muxes' handlers (the files of this package that
// implement them each add theirs here).
func (s *Server) routes() {
	s.envdRoutes()
	s.planeRoutes()
}

// key returns the request's API key, compared in constant time against
// every configured key (no early exit that would time which one matched).
func (s *Server) key(r *http.Request) (Key, bool) {
	got := []byte(r.Header.Get(hdrAPIKey))
	var found Key
	ok := 0
	for _, k := range s.cfg.Keys {
		if subtle.ConstantTimeCompare(got, k.secret) == 1 {
			found, ok = k, 1
		}
	}
	return found, ok == 1 && len(got) > 0
}

// Token is a sandbox's access token: HMAC-SHA256 of its id under the
// server's secret, base64url.
func (s *Server) Token(sandboxID string) string {
	m := hmac.New(sha256.New, s.cfg.Secret)
	m.Write([]byte(sandboxID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// tokenOK says whether the request carries the sandbox's access token.
func (s *Server) tokenOK(r *http.Request, sandboxID string) bool {
	return hmac.Equal([]byte(r.Header.Get(hdrAccessToken)), []byte(s.Token(sandboxID)))
}

// apiError is the control plane's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers the control plane's {code, message}.
func fail(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, apiError{Code: status, Message: fmt.Sprintf(format, args...)})
}

// LoadKeys reads the API keys file: one "NAME KEY" per line, '#' starts a
// comment. The file must be a regular file of this user (or root) that
// nobody else can read or write (mode 0600 or stricter).
func LoadKeys(path string) ([]Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("--e2b-keys %s: %w", path, err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("--e2b-keys %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("--e2b-keys %s: not a regular file: %w", path, api.ErrInvalid)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
		return nil, fmt.Errorf("--e2b-keys %s: owned by uid %d, not this user (%d): %w", path, st.Uid, uid, api.ErrForbidden)
	}
	if st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("--e2b-keys %s: mode %04o lets others read it: chmod 600 %s: %w", path, st.Mode&0o777, path, api.ErrForbidden)
	}
	var keys []Key
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, secret, ok := strings.Cut(line, " ")
		secret = strings.TrimSpace(secret)
		if !ok || name == "" || len(secret) < 16 || strings.ContainsAny(secret, " \t") {
			return nil, fmt.Errorf("--e2b-keys %s:%d: write 'NAME KEY', the key at least 16 characters without spaces: %w", path, n, api.ErrInvalid)
		}
		if names[name] {
			return nil, fmt.Errorf("--e2b-keys %s:%d: the name %q appears twice: %w", path, n, name, api.ErrInvalid)
		}
		for _, k := range keys {
			if bytes.Equal(k.secret, []byte(secret)) {
				return nil, fmt.Errorf("--e2b-keys %s:%d: the key of %q is also %q's: give each name its own key: %w", path, n, name, k.Name, api.ErrInvalid)
			}
		}
		names[name] = true
		keys = append(keys, Key{Name: name, secret: []byte(secret)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--e2b-keys %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--e2b-keys %s: no keys: write one 'NAME KEY' per line: %w", path, api.ErrInvalid)
	}
	return keys, nil
}

// SecretFile is the token secret's file in the store.
const SecretFile = "e2b.secret"

// LoadSecret reads the store's token secret, making it (32 random bytes,
// mode 0600) the first time. A secret that others can read, or of another
// owner, is refused: anyone holding it could forge every sandbox's token.
func LoadSecret(storeRoot string) ([]byte, error) {
	path := filepath.Join(storeRoot, SecretFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(path, secret, 0o600); err != nil {
			return nil, fmt.Errorf("e2b token secret %s: %w", path, err)
		}
		return secret, nil
	}
	if err != nil {
		return nil, fmt.Errorf("e2b token secret %s: %w", path, err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("e2b token secret %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("e2b token secret %s: not a regular file of this user with mode 0600: remove it (every sandbox's token changes): %w", path, api.ErrForbidden)
	}
	secret, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return nil, fmt.Errorf("e2b token secret %s: %w", path, err)
	}
	if len(secret) < 32 {
		return nil, fmt.Errorf("e2b token secret %s: shorter than 32 bytes: remove it (every sandbox's token changes): %w", path, api.ErrInvalid)
	}
	return secret, nil
}

// errNoSandbox: no live sandbox has the id (envd answers 404 for it, as
// for another key's sandbox: the caller learns nothing about either).
var errNoSandbox = fmt.Errorf("sandbox not found: %w", api.ErrNotFound)

// envdSandbox authenticates an envd request and opens its sandbox's
// current environment: 401 without the sandbox's token, 404 for a
// sandbox that is gone or paused.
func (s *Server) envdSandbox(r *http.Request) (*hostfork.Env, error) {
	id := r.Header.Get(hdrSandboxID)
	if !s.tokenOK(r, id) {
		return nil, fmt.Errorf("sandbox %s: a missing or wrong X-Access-Token (the envdAccessToken create answered): %w", id, api.ErrForbidden)
	}
	return s.liveEnv(r.Context(), id)
}

// liveEnv opens the active environment of sandbox id: one record read
// when the control plane's cache knows it (plane.go).
func (s *Server) liveEnv(ctx context.Context, id string) (*hostfork.Env, error) {
	return s.liveEnvCached(ctx, id)
}
