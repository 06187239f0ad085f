package server

import (
	"crypto/subtle"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/client"
)

// The web view (docs/web.md): a page of ours, embedded, served with the
// JSON API's own handlers for what it reads and for its one action, stop.

//go:embed web
var webFiles embed.FS

// WebCookie is the cookie the page's token is kept in.
const WebCookie = "hostfork_web"

// WebCSP is the page's Content-Security-Policy: scripts only from this
// server's files (no inline script, no eval), no framing. Inline styles
// are allowed: xterm.js sizes its terminal with <style> elements it makes
// (decision 121).
const WebCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// webRoutes are the JSON API's routes the page may call: reads, and stop.
var webRoutes = map[string]bool{
	"GET /v1/_ping": true, "GET /v1/version": true,
	"GET /v1/envs": true, "GET /v1/envs/{id}": true, "POST /v1/envs/{id}/stop": true,
	"GET /v1/commands": true, "GET /v1/commands/{id}": true, "POST /v1/commands/{id}/stop": true,
	"GET /v1/commands/{id}/logs": true, "GET /v1/commands/{id}/attach": true,
	"GET /v1/events": true, "GET /v1/capacity": true, "GET /v1/usage": true, "GET /v1/usage/btrfs": true,
}

// WebOptions configure the web view's handler.
type WebOptions struct {
	// Token is the secret a request must carry (cookie, bearer, or once
	// in the page's URL).
	Token string
	// Port is the listener's port: the Host header must name it.
	Port string
	// TLS: the listener speaks TLS (the cookie is Secure, origins https).
	TLS bool
	// Names are DNS names the Host header may carry besides IP literals
	// and localhost (a TLS certificate's names).
	Names []string
}

// WebHandler serves the web view on a TCP listener: the page, its files,
// and the JSON API routes of webRoutes, after the checks of checkWeb.
func (s *Server) WebHandler(o WebOptions) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes {
		if webRoutes[rt.method+" "+rt.path] {
			mux.Handle(rt.method+" "+rt.path, s.adapt(rt))
		}
	}
	static, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err)
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h[client.VersionHeader] = []string{client.APIVersion}
		h.Set("Content-Security-Policy", WebCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if err := o.check(r); err != nil {
			w.Header().Set("Connection", "close")
			s.writeError(w, err)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && r.URL.Path == "/" && r.Method == http.MethodGet && o.valid(t) {
			// The printed URL: keep the token in a cookie and take it
			// out of the address bar (and of the history).
			http.SetCookie(w, &http.Cookie{Name: WebCookie, Value: t, Path: "/", HttpOnly: true, Secure: o.TLS, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if !o.authorized(r) {
			s.writeError(w, withStatus(http.StatusUnauthorized, fmt.Errorf("open the URL hostfork serve printed (it carries the token; the token is also in the store's web-token file): %w", hostfork.ErrForbidden)))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/v1/commands/") && strings.HasSuffix(r.URL.Path, "/attach") {
			// The page only watches a session: nothing typed goes in.
			q := r.URL.Query()
			q.Set("no_stdin", "1")
			r.URL.RawQuery = q.Encode()
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			s.writeError(w, withStatus(http.StatusNotFound, fmt.Errorf("%s %s: the web view does not serve this (it reads, and stops; use the API's socket for the rest): %w", r.Method, r.URL.Path, hostfork.ErrNotFound)))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// check refuses what did not come from the page itself: a Host that is
// not this listener's (DNS rebinding), an Origin or a Referer of another
// origin (cross-site requests, a token leaked in a link), and requests a
// browser marks as cross-site.
func (o WebOptions) check(r *http.Request) error {
	forbid := func(format string, args ...any) error {
		return withStatus(http.StatusForbidden, fmt.Errorf(format+": %w", append(args, hostfork.ErrForbidden)...))
	}
	if !o.host(r.Host) {
		return forbid("Host %q is not this web view's (open it by IP address or localhost, with its port)", r.Host)
	}
	self := "http://" + r.Host
	if o.TLS {
		self = "https://" + r.Host
	}
	if v, ok := r.Header["Origin"]; ok && (len(v) != 1 || v[0] != self) {
		return forbid("Origin %q is not this web view's (%s)", strings.Join(v, ","), self)
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		u, err := url.Parse(ref)
		if err != nil || u.Scheme+"://"+u.Host != self {
			return forbid("a Referer of another origin")
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return forbid("a %s request (Sec-Fetch-Site)", r.Header.Get("Sec-Fetch-Site"))
	}
	return nil
}

// host reports whether a Host header names this listener: its port, and
// an IP literal, localhost or one of Names.
func (o WebOptions) host(h string) bool {
	host, port, err := net.SplitHostPort(h)
	if err != nil || port != o.Port {
		return false
	}
	if metricsHost(host) {
		return true
	}
	return slices.ContainsFunc(o.Names, func(n string) bool { return strings.EqualFold(n, host) })
}

func (o WebOptions) valid(t string) bool {
	return o.Token != "" && subtle.ConstantTimeCompare([]byte(t), []byte(o.Token)) == 1
}

// authorized reports whether r carries the token: the cookie, or
// Authorization: Bearer (scripts).
func (o WebOptions) authorized(r *http.Request) bool {
	if c, err := r.Cookie(WebCookie); err == nil && o.valid(c.Value) {
		return true
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && o.valid(t) {
		return true
	}
	return false
}
