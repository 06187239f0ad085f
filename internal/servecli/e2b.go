package servecli

import (
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/e2b"
	"github.com/habemus-papadum/hostfork/spec"
)

// Limits of the E2B-compatible front's listener (docs/security.md,
// "The E2B-compatible front"); its headers are bounded as every
// listener's (server.Serve).
const (
	e2bMaxConns    = 256
	e2bIdleTimeout = 120 * time.Second
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

// newE2B loads the token secret and makes the front's handler.
func newE2B(h *hostfork.Host, f *cli.ServeFlags, keys []e2b.Key, logf func(string, ...any)) (*e2b.Server, error) {
	secret, err := e2b.LoadSecret(h.Root())
	if err != nil {
		return nil, err
	}
	var maxUpload int64
	if f.E2BMaxUpload != "" {
		maxUpload, _ = spec.ParseSize(f.E2BMaxUpload) // checked by e2bFlagsOK
	}
	return e2b.New(e2b.Config{Host: h, Keys: keys, Templates: f.E2BTemplates, Secret: secret, MaxUpload: maxUpload, Logf: logf})
}
