package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// exitError carries submit's exit status.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newSubmitCmd() *cobra.Command {
	var (
		conn     connFlags
		specFile string
		exports  []string
		id       string
		opts     flow.Options
		hb, pick time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit [flags] -- CMD [ARGS...]",
		Short: "Run a command in an environment on some node, through the RunInEnvironment workflow",
		Long: "submit starts the RunInEnvironment workflow on the shared queue: a node\n" +
			"with a free admission slot creates the environment (--spec FILE, YAML or\n" +
			"JSON; default an empty spec), runs the command in it, stops it, and copies\n" +
			"each --export TREE=DEST (DEST is a path on that node). It waits and prints\n" +
			"the workflow's result as JSON, and exits with the command's status (1 when\n" +
			"the workflow failed otherwise; a non-zero status fails the workflow with\n" +
			"an ApplicationError of type " + flow.ErrCommandFailed + " whose details are the same\n" +
			"result). SIGINT or SIGTERM cancels the workflow: the command's\n" +
			"tree is stopped, and the result printed.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := flow.Request{Commands: []flow.Command{{Argv: args}}, Export: map[string]string{}}
			if specFile != "" {
				data, err := os.ReadFile(specFile)
				if err != nil {
					return err
				}
				s, err := spec.Parse(data)
				if err != nil {
					return fmt.Errorf("%s: %w", specFile, err)
				}
				req.Spec = *s
			}
			check := req.Spec
			if err := check.Validate(); err != nil {
				return fmt.Errorf("spec: %w", err)
			}
			for _, e := range exports {
				tree, dest, ok := strings.Cut(e, "=")
				if !ok || tree == "" || dest == "" {
					return fmt.Errorf("--export %q: write TREE=DEST", e)
				}
				if _, ok := req.Spec.Trees[tree]; !ok {
					return fmt.Errorf("--export %s: the spec has no tree named %q", e, tree)
				}
				req.Export[tree] = dest
			}
			opts.HeartbeatTimeout, opts.NodePickup = api.Duration(hb), api.Duration(pick)
			req.Options = opts
			if id == "" {
				id = "hostfork-" + uuid.NewString()
			}
			sdk := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx := cmd.Context()
			c, err := conn.dial(context.WithoutCancel(ctx), "", sdk)
			if err != nil {
				return err
			}
			defer c.Close()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: flow.SharedQueue}, flow.WorkflowRunInEnvironment, req)
			if err != nil {
				return fmt.Errorf("starting the workflow: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "workflow %s run %s\n", run.GetID(), run.GetRunID())
			res, err := wait(ctx, c, run)
			if res != nil {
				out, _ := json.MarshalIndent(res, "", "  ")
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
			}
			var ae *temporal.ApplicationError
			if errors.As(err, &ae) && ae.Type() == flow.ErrCommandFailed && res != nil {
				// Everything ran; the command's status is the answer.
				err = nil
			}
			switch {
			case err != nil:
				return err
			case res.ExitStatus < 0:
				return exitError{1}
			case res.ExitStatus != 0:
				return exitError{res.ExitStatus}
			}
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	conn.register(f)
	f.StringVar(&specFile, "spec", "", "environment spec `file` (YAML or JSON)")
	f.StringArrayVar(&exports, "export", nil, "copy tree `TREE=DEST` after the stop (DEST: a path on the node); repeatable")
	f.StringVar(&id, "id", "", "workflow `id` (default: hostfork-<uuid>)")
	f.DurationVar(&hb, "heartbeat-timeout", flow.DefaultHeartbeatTimeout, "a node that has not heartbeated for this long is lost")
	f.DurationVar(&pick, "node-pickup", flow.DefaultNodePickup, "a node that does not take a task from its queue within this is lost")
	f.IntVar(&opts.MaxPlacements, "max-placements", flow.DefaultMaxPlacements, "environments to try before giving up")
	return cmd
}

// wait waits for the workflow; if ctx ends first (a signal), it cancels the
// workflow and waits for it to end.
func wait(ctx context.Context, c client.Client, run client.WorkflowRun) (*flow.Result, error) {
	var res flow.Result
	err := run.Get(ctx, &res)
	if err != nil && ctx.Err() != nil {
		bg, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if cerr := c.CancelWorkflow(bg, run.GetID(), run.GetRunID()); cerr != nil {
			return nil, fmt.Errorf("cancelling workflow %s: %w", run.GetID(), cerr)
		}
		err = c.GetWorkflow(bg, run.GetID(), run.GetRunID()).Get(bg, &res)
	}
	if err == nil {
		return &res, nil
	}
	// The workflow's result travels as the details of its error.
	var ce *temporal.CanceledError
	var ae *temporal.ApplicationError
	switch {
	case errors.As(err, &ce) && ce.HasDetails() && ce.Details(&res) == nil:
		return &res, fmt.Errorf("workflow %s was cancelled: %w", run.GetID(), err)
	case errors.As(err, &ae) && ae.HasDetails() && ae.Details(&res) == nil:
		return &res, fmt.Errorf("workflow %s failed: %w", run.GetID(), err)
	}
	return nil, fmt.Errorf("workflow %s: %w", run.GetID(), err)
}
