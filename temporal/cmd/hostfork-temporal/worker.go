package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
	"github.com/habemus-papadum/hostfork/temporal/node"
)

func newWorkerCmd() *cobra.Command {
	var (
		conn     connFlags
		o        node.Options
		root     string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "worker --node NAME",
		Short: "Serve one node: hostfork environments as Temporal activities",
		Long: "worker opens this node's hostfork store, reaps it, and polls two task\n" +
			"queues: the shared \"" + flow.SharedQueue + "\" queue (RunInEnvironment workflow tasks, and\n" +
			"Create while hostfork's admission has a free slot and is not paused) and\n" +
			"its own \"" + flow.NodeQueuePrefix + "NAME\" queue (Exec, Stop, Export, Status, Logs). It\n" +
			"prints \"worker NAME ready\" once both are polled. Every environment it\n" +
			"makes is owned by this process with owner-exit stop: when the worker\n" +
			"exits, its environments stop. Logs (JSON) go to stderr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			if !flow.ValidNode(o.Node) {
				return fmt.Errorf("--node %q: give a name of letters, digits, '.', '_', '-' (max 63)", o.Node)
			}
			ctx := cmd.Context()
			logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			sdkLevel := max(level, slog.LevelWarn) // the SDK is chatty at info
			sdk := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: sdkLevel})).With("component", "temporal-sdk")
			h, err := hostfork.Open(ctx, hostfork.Options{Root: root})
			if err != nil {
				return err
			}
			defer h.Close()
			host, _ := os.Hostname()
			c, err := conn.dial(ctx, fmt.Sprintf("%s@%s:%d", o.Node, host, os.Getpid()), sdk)
			if err != nil {
				return err
			}
			defer c.Close()
			o.Client, o.Host, o.Logger = c, h, logger
			o.Ready = func() { fmt.Fprintf(cmd.OutOrStdout(), "worker %s ready\n", o.Node) }
			return node.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	conn.register(f)
	f.StringVar(&o.Node, "node", "", "this node's `name` (its queue is "+flow.NodeQueuePrefix+"NAME)")
	f.StringVar(&root, "root", "", "hostfork store `directory` (default: hostfork's default root)")
	f.DurationVar(&o.DefaultTTL, "ttl", node.DefaultTTL, "max runtime of an environment whose spec gives none")
	f.DurationVar(&o.MaxTTL, "max-ttl", node.DefaultMaxTTL, "longest max runtime accepted")
	f.DurationVar(&o.ReapInterval, "reap-interval", node.DefaultReapInterval, "how often to reap the store")
	f.IntVar(&o.NodeSlots, "node-slots", node.DefaultNodeSlots, "concurrent activities on the node's own queue")
	f.StringVar(&logLevel, "log-level", "info", "log `level`: debug, info, warn, error")
	_ = cmd.MarkFlagRequired("node")
	return cmd
}
