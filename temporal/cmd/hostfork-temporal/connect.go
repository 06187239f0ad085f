package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/habemus-papadum/hostfork/temporal/node"
)

// connFlags are the flags that say how to reach the Temporal cluster,
// shared by worker and submit.
type connFlags struct {
	address, namespace                    string
	tlsCert, tlsKey, tlsCA, tlsServerName string
}

func (c *connFlags) register(f *pflag.FlagSet) {
	f.StringVar(&c.address, "address", "127.0.0.1:7233", "Temporal frontend `HOST:PORT`")
	f.StringVar(&c.namespace, "namespace", "default", "Temporal `namespace`")
	f.StringVar(&c.tlsCert, "tls-cert", "", "client certificate `file` (PEM) for mutual TLS; with --tls-key")
	f.StringVar(&c.tlsKey, "tls-key", "", "client private key `file` (PEM)")
	f.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate `file` (PEM) that signed the server's certificate; default: the system's roots")
	f.StringVar(&c.tlsServerName, "tls-server-name", "", "`name` to verify the server's certificate against (default: the host of --address)")
}

// tlsConfig is nil (plaintext) unless a TLS flag is given.
func (c *connFlags) tlsConfig() (*tls.Config, error) {
	if c.tlsCert == "" && c.tlsKey == "" && c.tlsCA == "" && c.tlsServerName == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.tlsServerName}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// dial connects to the cluster; sdk receives the SDK's own logs, a
// cancellation at INFO (node.SDKLogger).
func (c *connFlags) dial(ctx context.Context, identity string, sdk *slog.Logger) (client.Client, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	cl, err := client.DialContext(ctx, client.Options{
		HostPort:          c.address,
		Namespace:         c.namespace,
		Identity:          identity,
		Logger:            node.SDKLogger(sdk),
		ConnectionOptions: client.ConnectionOptions{TLS: tc},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s (namespace %s): %w", c.address, c.namespace, err)
	}
	return cl, nil
}
