// Package devserver runs an embedded single-node Temporal server backed by
// SQLite, configured the way `temporal server start-dev` configures it
// (temporalio/cli internal/devserver at the commit that pins server v1.31.0):
// all four services (frontend, history, matching, worker) in this process,
// static membership on 127.0.0.1 instead of ringpop, one history shard, one
// SQLite store for both persistence and visibility, archival off, no metrics
// listener, no HTTP API and no UI.
//
// A Server is started once and stopped once (Temporal's server object does not
// restart); to restart, call Start again with the same DBFile: the schema is
// created only when the file does not exist yet, the namespace registration
// is idempotent, and the cluster metadata stored in the file wins over the
// new configuration, so workflows started before the restart continue.
package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

// DefaultNamespace is registered when Options.Namespace is empty.
const DefaultNamespace = "default"

// DefaultHost is the address every service binds to when Options.Host is empty.
const DefaultHost = "127.0.0.1"

const clusterName = "active"

// Options configure Start. The zero value is an in-memory server on a free
// loopback port with the "default" namespace and no logging.
type Options struct {
	// DBFile is the SQLite file that holds all of the server's state. It is
	// created, with its schema, if it does not exist; its directory must.
	// Empty means an in-memory database that is gone when the server stops.
	DBFile string
	// Port is the frontend gRPC port, the one clients and workers dial.
	// 0 picks a free port. The internal ports of the history, matching and
	// worker services are always picked free.
	Port int
	// Host is the IP address the services bind to. Empty means 127.0.0.1.
	// It must be an IP address, not a name.
	Host string
	// Namespace is registered (if not yet registered) before the server
	// starts. Empty means "default".
	Namespace string
	// Logger receives the server's logs. Nil discards them; the server logs
	// nothing to stdout or stderr on its own.
	Logger *slog.Logger
	// DynamicConfig overrides or adds dynamic config values by key, for
	// example "matching.numTaskqueueReadPartitions": 1. Values must have the
	// Go type the setting expects (int, not int64; bool; string; duration).
	DynamicConfig map[string]any
}

// Server is a running embedded Temporal server.
type Server struct {
	srv       temporal.Server
	addr      string
	namespace string
	dbFile    string

	stopOnce sync.Once
	stopErr  error
}

// defaultDynamicConfig mirrors the values `temporal server start-dev` sets,
// less the experimental CHASM / standalone-activity switches.
func defaultDynamicConfig() map[dynamicconfig.Key]any {
	return map[dynamicconfig.Key]any{
		// Host-level mutable state cache: 8k entries instead of the default.
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key(): 8096,
		// Visibility rate limit up from the default.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		// New search attributes are visible at once. (The CLI also forces
		// the Nexus endpoint refresh; server v1.31.0 has no such setting.)
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		// With the cache refresh forced, allow more persistence QPS.
		dynamicconfig.FrontendPersistenceMaxQPS.Key(): 10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():  45000,
	}
}

// Start builds and starts a server and returns once its frontend answers
// for the namespace. ctx bounds the start (schema setup, service start and
// the readiness wait); it does not bound the server's life: call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts.Host = cmp.Or(opts.Host, DefaultHost)
	if net.ParseIP(opts.Host) == nil {
		return nil, fmt.Errorf("devserver: host %q is not an IP address", opts.Host)
	}
	opts.Namespace = cmp.Or(opts.Namespace, DefaultNamespace)
	if opts.Port == 0 {
		p, err := freePort(opts.Host)
		if err != nil {
			return nil, err
		}
		opts.Port = p
	} else if err := checkPortFree(opts.Host, opts.Port); err != nil {
		return nil, fmt.Errorf("devserver: frontend port %d: %w", opts.Port, err)
	}
	logger := log.Logger(log.NewNoopLogger())
	if opts.Logger != nil {
		logger = slogLogger{opts.Logger}
	}

	conf, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	sqlConf := conf.Persistence.DataStores[sqliteplugin.PluginName].SQL
	if err := prepareDB(sqlConf, opts); err != nil {
		return nil, err
	}

	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devserver: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("devserver: claim mapper: %w", err)
	}
	dyn := dynamicconfig.StaticClient{}
	maps.Copy(dyn, defaultDynamicConfig())
	for k, v := range opts.DynamicConfig {
		dyn[dynamicconfig.MakeKey(k)] = v
	}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for _, svc := range []primitives.ServiceName{
		primitives.FrontendService, primitives.HistoryService,
		primitives.MatchingService, primitives.WorkerService,
	} {
		port := conf.Services[string(svc)].RPC.GRPCPort
		hosts[svc] = static.SingleLocalHost(net.JoinHostPort(opts.Host, strconv.Itoa(port)))
	}

	srv, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		return nil, fmt.Errorf("devserver: new server: %w", err)
	}
	s := &Server{
		srv:       srv,
		addr:      net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)),
		namespace: opts.Namespace,
		dbFile:    opts.DBFile,
	}
	// temporal.Server.Start takes no context; run it aside so that ctx can
	// still bound the start.
	started := make(chan error, 1)
	go func() { started <- srv.Start() }()
	select {
	case err = <-started:
	case <-ctx.Done():
		err = <-started // the services start with their own timeout
		if err == nil {
			err = ctx.Err()
		}
	}
	if err == nil {
		err = s.waitReady(ctx)
	}
	if err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("devserver: start: %w", err)
	}
	return s, nil
}

// Address is the frontend's HOST:PORT, for client.Options.HostPort.
func (s *Server) Address() string { return s.addr }

// Namespace is the namespace registered at start.
func (s *Server) Namespace() string { return s.namespace }

// DBFile is the SQLite file in use, empty for an in-memory server.
func (s *Server) DBFile() string { return s.dbFile }

// Stop stops all services and closes the database. It is safe to call more
// than once; later calls return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.srv.Stop() })
	return s.stopErr
}

// waitReady dials the frontend until DescribeNamespace answers.
func (s *Server) waitReady(ctx context.Context) error {
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  s.addr,
		Namespace: s.namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		return fmt.Errorf("dial frontend: %w", err)
	}
	defer c.Close()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c.WorkflowService().DescribeNamespace(callCtx,
			&workflowservice.DescribeNamespaceRequest{Namespace: s.namespace})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %q not ready: %w", s.namespace, errors.Join(ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func buildConfig(opts Options) (*config.Config, error) {
	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = opts.Host
	// Global.Metrics stays nil: the server uses a no-op metrics handler and
	// opens no Prometheus listener. Global.PProf.Port stays 0: no pprof.

	conf.Persistence.DefaultStore = sqliteplugin.PluginName
	conf.Persistence.VisibilityStore = sqliteplugin.PluginName
	conf.Persistence.NumHistoryShards = 1
	sqlConf := &config.SQL{PluginName: sqliteplugin.PluginName}
	if opts.DBFile == "" {
		sqlConf.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		// Shared-cache in-memory databases are per process by name: a random
		// name keeps two servers in one process (tests) apart.
		sqlConf.DatabaseName = strconv.Itoa(rand.IntN(1 << 30))
	} else {
		sqlConf.ConnectAttributes = map[string]string{"mode": "rwc"}
		sqlConf.DatabaseName = opts.DBFile
	}
	conf.Persistence.DataStores = map[string]config.DataStore{
		sqliteplugin.PluginName: {SQL: sqlConf},
	}

	frontend := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	conf.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontend,
				// ClusterID empty: a new UUID on first start, then the one
				// stored in the database file.
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{}
	for _, svc := range []string{"frontend", "history", "matching", "worker"} {
		port := opts.Port
		if svc != "frontend" {
			p, err := freePort(opts.Host)
			if err != nil {
				return nil, err
			}
			port = p
		}
		conf.Services[svc] = config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: opts.Host}}
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The worker service's own SDK client dials this.
	conf.PublicClient.HostPort = frontend
	return &conf, nil
}

// prepareDB creates the schema in a new database file and registers the
// namespace; both are no-ops on a database that already has them.
func prepareDB(sqlConf *config.SQL, opts Options) error {
	if opts.DBFile != "" {
		if _, err := os.Stat(opts.DBFile); errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat(filepath.Dir(opts.DBFile)); err != nil {
				return fmt.Errorf("devserver: database directory: %w", err)
			}
			if err := sqliteschema.SetupSchema(sqlConf); err != nil {
				return fmt.Errorf("devserver: set up schema in %s: %w", opts.DBFile, err)
			}
		} else if err != nil {
			return fmt.Errorf("devserver: database file: %w", err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, opts.Namespace, false, nil)
	if err != nil {
		return fmt.Errorf("devserver: namespace %q: %w", opts.Namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, ns); err != nil {
		return fmt.Errorf("devserver: register namespace %q: %w", opts.Namespace, err)
	}
	return nil
}
