package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/client"
)

// MaxBody is the largest request body the server reads (413 beyond).
const MaxBody = 1 << 20

// ShutdownGrace bounds how long in-flight requests may take to finish
// after a SIGTERM; streams (event and log follows, waits) end at once.
const ShutdownGrace = 5 * time.Second

// mutationTimeout bounds a mutation that runs to completion although its
// client left (create, start, stop, signal, reap): half-made work is worse
// than an answer nobody reads.
const mutationTimeout = 5 * time.Minute

// Config configures a Server.
type Config struct {
	// Host is the open store; the server only calls it.
	Host *hostfork.Host
	// OwnerUID is the store's owner (the uid owning its directory): it
	// and root may use the API, nobody else.
	OwnerUID int
	// SocketPath is the socket's path (documentation, the Host check).
	SocketPath string
	// ExitCode maps an error to the CLI's exit code (cli.ExitCodeOf).
	ExitCode func(error) int
	// Version returns the build provenance (GET /v1/version).
	Version func() any
	// Doctor builds the doctor report (GET /v1/doctor), as `hostfork
	// doctor --json` does.
	Doctor func(ctx context.Context) (any, error)
	// Logf reports what the server can't answer to anyone (a failed
	// scrape source, a listener error); nil discards it.
	Logf func(format string, args ...any)
}

// Server is the HTTP API over one Host.
type Server struct {
	cfg      Config
	h        *hostfork.Host
	mux      *http.ServeMux
	routes   []route
	reg      *prometheus.Registry
	launches prometheus.Histogram
	// streams ends the long requests (follows, waits) at shutdown.
	streams    context.Context
	endStreams context.CancelFunc
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if cfg.Host == nil {
		return nil, errors.New("server: no Host")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &Server{cfg: cfg, h: cfg.Host, mux: http.NewServeMux()}
	s.streams, s.endStreams = context.WithCancel(context.Background())
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	s.routes = s.table()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.path, s.adapt(rt))
	}
	return s, nil
}

// adapt turns a route's handler into an http.Handler.
func (s *Server) adapt(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch v, err := rt.handle(w, r); {
		case err != nil:
			s.writeError(w, err)
		case v != nil:
			writeJSON(w, rt.status, v)
		}
	})
}

// Handler is the socket's handler: every check, then the routes.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()[client.VersionHeader] = []string{client.APIVersion}
		if err := s.admit(r); err != nil {
			// A refused client keeps no connection open.
			w.Header().Set("Connection", "close")
			s.writeError(w, err)
			return
		}
		if _, pattern := s.mux.Handler(r); pattern == "" {
			s.unrouted(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// unrouted answers a request no route takes with a JSON 404 or 405.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == http.StatusMethodNotAllowed {
		if a := rec.header.Get("Allow"); a != "" {
			w.Header().Set("Allow", a)
		}
		s.writeError(w, withStatus(http.StatusMethodNotAllowed, invalid("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow"))))
		return
	}
	s.writeError(w, withStatus(http.StatusNotFound, fmt.Errorf("%s %s: no such endpoint (see GET /v1/openapi.json): %w", r.Method, r.URL.Path, hostfork.ErrNotFound)))
}

type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.status = code }

// admit refuses browsers and other users (docs/api.md, "Who may talk to
// it").
func (s *Server) admit(r *http.Request) error {
	if err := refuseBrowser(r); err != nil {
		return err
	}
	if !socketHost(r.Host) {
		return withStatus(http.StatusForbidden, fmt.Errorf("Host %q is not this server's (send Host: localhost or unix): %w", r.Host, hostfork.ErrForbidden))
	}
	p := peerOf(r.Context())
	if !p.ok {
		return withStatus(http.StatusForbidden, fmt.Errorf("the peer's credentials could not be read: %w", hostfork.ErrForbidden))
	}
	if p.uid != 0 && p.uid != s.cfg.OwnerUID {
		return withStatus(http.StatusForbidden, fmt.Errorf("uid %d may not use this server: only root and the store's owner (uid %d) may: %w", p.uid, s.cfg.OwnerUID, hostfork.ErrForbidden))
	}
	return nil
}

// refuseBrowser refuses requests a browser would send: any Origin or
// Referer header (a page, or a DNS-rebinding attack, as tailscale's
// LocalAPI refuses them).
func refuseBrowser(r *http.Request) error {
	if _, ok := r.Header["Origin"]; ok {
		return withStatus(http.StatusForbidden, fmt.Errorf("requests with an Origin header are refused (browsers may not use this API): %w", hostfork.ErrForbidden))
	}
	if _, ok := r.Header["Referer"]; ok {
		return withStatus(http.StatusForbidden, fmt.Errorf("requests with a Referer header are refused (browsers may not use this API): %w", hostfork.ErrForbidden))
	}
	return nil
}

// socketHost reports whether h is a Host header the socket accepts: none,
// "localhost" (curl --unix-socket http://localhost/...) or "unix" (the Go
// client).
func socketHost(h string) bool {
	switch h {
	case "", "localhost", client.UnixHost:
		return true
	}
	return false
}

// metricsHost reports whether h is a Host header the TCP metrics listener
// accepts: an IP literal or localhost, with or without a port — never a
// DNS name, which a rebinding page could point here.
func metricsHost(h string) bool {
	host := h
	if hh, _, err := net.SplitHostPort(h); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return host == "localhost" || net.ParseIP(host) != nil
}

// MetricsHandler serves GET /metrics only, for the TCP listener: no peer
// credentials exist there, so it is read-only and takes no other route.
func (s *Server) MetricsHandler() http.Handler {
	prom := s.metricsHTTP()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()[client.VersionHeader] = []string{client.APIVersion}
		if err := refuseBrowser(r); err != nil {
			s.writeError(w, err)
			return
		}
		if !metricsHost(r.Host) {
			s.writeError(w, withStatus(http.StatusForbidden, fmt.Errorf("Host %q: scrape by IP address or localhost: %w", r.Host, hostfork.ErrForbidden)))
			return
		}
		if r.URL.Path != "/metrics" {
			s.writeError(w, withStatus(http.StatusNotFound, fmt.Errorf("only /metrics is served here: %w", hostfork.ErrNotFound)))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.writeError(w, withStatus(http.StatusMethodNotAllowed, invalid("%s /metrics: use GET", r.Method)))
			return
		}
		prom.ServeHTTP(w, r)
	})
}

// Listeners are what Serve answers on.
type Listeners struct {
	// API is the socket of the JSON API (peer credentials).
	API net.Listener
	// TCP are the TCP fronts: the metrics listener (MetricsHandler), the
	// web view (WebHandler), the E2B-compatible front.
	TCP []Front
}

// Front is a TCP listener and the handler it serves, with its limits.
type Front struct {
	// Name says which it is in an error while serving (the flag that
	// made it, e.g. "--e2b-listen").
	Name     string
	Listener net.Listener
	Handler  http.Handler
	// TLS, when not nil, is spoken on the listener.
	TLS *tls.Config
	// MaxConns bounds its open connections, more are closed at accept
	// (0: MaxMetricsConns).
	MaxConns int
	// Idle closes a connection idle that long (0: 60 s).
	Idle time.Duration
	// HTTP2 serves HTTP/2 besides HTTP/1.1: over TLS, and without it
	// (h2c, as Connect's clients may speak).
	HTTP2 bool
}

// Serve answers on the listeners until ctx ends, then shuts down
// gracefully: it stops accepting, ends the streams, and gives in-flight
// requests ShutdownGrace to finish. The caller closes the listeners' files
// (Socket.Close) and the Host afterwards.
func (s *Server) Serve(ctx context.Context, l Listeners) error {
	sock := &limitListener{Listener: l.API, owner: s.cfg.OwnerUID, unix: true, max: MaxConns, others: MaxOtherConns, perUser: MaxConnsPerOtherUser, byUID: map[int]int{}}
	fronts := append([]Front{{Name: "the API socket", Listener: sock, Handler: s.Handler()}}, l.TCP...)
	servers := make([]*http.Server, len(fronts))
	errc := make(chan error, len(fronts))
	for i, f := range fronts {
		hs := &http.Server{Handler: f.Handler, ConnContext: connContext, ReadHeaderTimeout: headerTimeout, IdleTimeout: cmp.Or(f.Idle, idleTimeout), MaxHeaderBytes: 64 << 10, TLSConfig: f.TLS, Protocols: new(http.Protocols)}
		hs.Protocols.SetHTTP1(true)
		hs.Protocols.SetHTTP2(f.HTTP2)
		hs.Protocols.SetUnencryptedHTTP2(f.HTTP2)
		ln := f.Listener
		if i > 0 {
			ln = &limitListener{Listener: ln, max: cmp.Or(f.MaxConns, MaxMetricsConns)}
		}
		servers[i] = hs
		go func() {
			var err error
			if f.TLS != nil {
				err = hs.ServeTLS(ln, "", "")
			} else {
				err = hs.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) && f.Name != "" {
				err = fmt.Errorf("%s: %w", f.Name, err)
			}
			errc <- err
		}()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.endStreams()
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	// Every front at once: none accepts a request while another drains,
	// and each has the whole grace.
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, hs := range servers {
		wg.Go(func() { errs[i] = hs.Shutdown(sctx) })
	}
	wg.Wait()
	err := errors.Join(errs...)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Requests still running after the grace are cut off; their
		// work (a create, a start) finishes or rolls back on its own.
		return nil
	}
	return err
}

// Timeouts of every connection (issue 39, item 4): a client that sends its
// headers, its body or nothing at all too slowly is cut off, so a held
// connection costs the server nothing for long. Responses (streams, waits)
// are not bounded here: they end with their request or at shutdown.
const (
	headerTimeout = 10 * time.Second
	bodyTimeout   = 30 * time.Second
	idleTimeout   = 60 * time.Second
)

// streamContext is the request's context, also ended at shutdown.
func (s *Server) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.streams, cancel)
	return ctx, func() { stop(); cancel() }
}

// mutationContext is a context for work that must not stop halfway when
// the client leaves: it keeps the request's values, not its cancellation.
func mutationContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), mutationTimeout)
}

// decode reads a JSON body into v: at most MaxBody bytes (413), unknown
// fields and trailing data refused (400).
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	defer rc.SetReadDeadline(time.Time{})
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = terr
			if err == nil {
				err = errors.New("trailing data after the JSON value")
			}
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mbe):
		return withStatus(http.StatusRequestEntityTooLarge, invalid("the request body is over the limit of %d bytes (1 MiB)", MaxBody))
	case errors.Is(err, io.EOF):
		return badRequest("a JSON body is required")
	case errors.Is(err, hostfork.ErrInvalid):
		return withStatus(http.StatusBadRequest, fmt.Errorf("request body: %w", err))
	}
	return badRequest("request body: %v", err)
}
