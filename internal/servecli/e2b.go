package servecli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/e2b"
	"github.com/habemus-papadum/hostfork/internal/server"
	"github.com/habemus-papadum/hostfork/spec"
)

// Limits of the E2B-compatible front's listener (docs/security.md,
// "The E2B-compatible front").
const (
	e2bMaxConns      = 256
	e2bHeaderTimeout = 10 * time.Second
	e2bIdleTimeout   = 120 * time.Second
)

// e2bFlagsOK checks the --e2b-* flags tcpTLS does not, before the store
// is opened.
func e2bFlagsOK(f *cli.ServeFlags) error {
	if f.E2BListen == "" {
		if f.E2BKeys != "" || f.E2BTemplates != "" {
			return cli.UsageError("--e2b-keys and --e2b-templates need --e2b-listen HOST:PORT")
		}
		return nil
	}
	if f.E2BKeys == "" {
		return cli.UsageError("--e2b-listen needs --e2b-keys FILE: a file (mode 0600) of 'NAME KEY' lines, the keys callers give as E2B_API_KEY")
	}
	if f.E2BMaxUpload != "" {
		if n, err := spec.ParseSize(f.E2BMaxUpload); err != nil || n <= 0 {
			return cli.UsageError("--e2b-max-upload %q: give a size above 0, e.g. 512M or 4G", f.E2BMaxUpload)
		}
	}
	return nil
}

// e2bFront is the E2B-compatible front's HTTP server, listening.
type e2bFront struct {
	hs  *http.Server
	ln  net.Listener
	url string
}

// startE2B loads the token secret and opens the listener.
func startE2B(h *hostfork.Host, f *cli.ServeFlags, tc *tls.Config, keys []e2b.Key, logf func(string, ...any)) (*e2bFront, error) {
	secret, err := e2b.LoadSecret(h.Root())
	if err != nil {
		return nil, err
	}
	var maxUpload int64
	if f.E2BMaxUpload != "" {
		maxUpload, _ = spec.ParseSize(f.E2BMaxUpload) // checked by e2bFlagsOK
	}
	front, err := e2b.New(e2b.Config{Host: h, Keys: keys, Templates: f.E2BTemplates, Secret: secret, MaxUpload: maxUpload, Logf: logf})
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: front, ReadHeaderTimeout: e2bHeaderTimeout, IdleTimeout: e2bIdleTimeout, MaxHeaderBytes: 64 << 10}
	// Connect (envd) works on HTTP/1.1; HTTP/2 without TLS (h2c) too.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	scheme := "http"
	if tc != nil {
		hs.TLSConfig = tc
		hs.Protocols.SetHTTP2(true)
		scheme = "https"
	}
	ln, err := net.Listen("tcp", f.E2BListen)
	if err != nil {
		return nil, cli.UsageError("--e2b-listen %s: %v", f.E2BListen, err)
	}
	return &e2bFront{hs: hs, ln: server.LimitTCP(ln, e2bMaxConns), url: scheme + "://" + ln.Addr().String()}, nil
}

// serve answers until ctx ends, then shuts down with the unix API's grace.
func (e *e2bFront) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		if e.hs.TLSConfig != nil {
			errc <- e.hs.ServeTLS(e.ln, "", "")
		} else {
			errc <- e.hs.Serve(e.ln)
		}
	}()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), server.ShutdownGrace)
	defer cancel()
	err := e.hs.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("--e2b-listen: %w", serveErr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}
