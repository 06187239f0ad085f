package cli

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

// labelsOf reads --label K=V flags (nil when none is given).
func labelsOf(flags []string) (map[string]string, error) {
	var m map[string]string
	for _, l := range flags {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageErr("--label %q: write it as KEY=VALUE", l)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}

// selectorFlags are --label K=V filters.
type selectorFlags struct{ labels []string }

func (f *selectorFlags) add(c *cobra.Command, what string) {
	c.Flags().StringArrayVar(&f.labels, "label", nil, "only "+what+" with label K=V (or with label K); repeatable, all must match")
}

func (f *selectorFlags) selector() (hostfork.Selector, error) {
	var sel hostfork.Selector
	for _, l := range f.labels {
		s, err := hostfork.ParseSelector(l)
		if err != nil || len(s) != 1 {
			return nil, usageErr("--label %q: write it as KEY=VALUE or KEY", l)
		}
		sel = append(sel, s...)
	}
	return sel, nil
}

func newPsCmd(g *globals) *cobra.Command {
	var all, asJSON, quiet bool
	var env string
	var sf selectorFlags
	c := &cobra.Command{
		Use:     "ps",
		Aliases: []string{"list"},
		Short:   "What is running on this node, why, where its output is, whether it is alive and stoppable",
		Args:    exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			sel, err := sf.selector()
			if err != nil {
				return err
			}
			// The table and -q print only what a brief listing has.
			f := hostfork.CommandFilter{Labels: sel, Live: !all, Brief: !asJSON}
			if env != "" {
				kind, id, err := h.Resolve(c.Context(), env)
				if err != nil {
					return err
				}
				if kind != "env" {
					return usageErr("--env %s: that is a command; give an environment id", env)
				}
				f.Env = id
			}
			rows, err := h.Commands(c.Context(), f)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, rows)
			}
			if quiet {
				for _, r := range rows {
					fmt.Fprintln(g.out, r.ID)
				}
				return nil
			}
			tw := newTable(g.out)
			fmt.Fprintln(tw, "ID\tENV\tSTATE\tPID\tAGE\tSTOP\tPURPOSE\tCOMMAND\tOUTPUT")
			for _, r := range rows {
				pid := "-"
				if r.PID != nil {
					pid = strconv.Itoa(*r.PID)
				}
				state := string(r.Liveness)
				if r.Liveness == hostfork.Exited {
					if st, ok := exitText(r.ExitCode, r.Signal); ok {
						state += "(" + st + ")"
					}
				}
				if r.StopReason != "" && r.Liveness != hostfork.Alive {
					state += " " + string(r.StopReason)
				}
				stop := "no"
				if r.Stoppable {
					stop = "yes"
				}
				why := whyText(r.Purpose, r.Labels)
				out := clean(r.StdoutPath)
				if out == "" {
					out = "(inherited)"
				} else if len(out) > 7 {
					out = out[:len(out)-len("/stdout")] + "/{stdout,stderr}"
				}
				// One row, concatenated: Fprintf's boxing of nine strings a
				// row is a tenth of 'ps --all' over 10,000 commands.
				io.WriteString(tw, r.ID+"\t"+r.Env+"\t"+state+"\t"+pid+"\t"+age(r.CreatedAt)+"\t"+stop+"\t"+why+"\t"+shortArgv(r.Argv)+"\t"+out+"\n")
			}
			return tw.Flush()
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "include exited commands")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	c.Flags().StringVar(&env, "env", "", "only the commands of this environment")
	sf.add(c, "commands")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (an array of command records)")
	return c
}

func newEnvsCmd(g *globals) *cobra.Command {
	var all, asJSON, quiet bool
	var states []string
	var sf selectorFlags
	c := &cobra.Command{
		Use:   "envs",
		Short: "Environments: their state, deadline, trees, commands, why they exist",
		Args:  exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			sel, err := sf.selector()
			if err != nil {
				return err
			}
			f := hostfork.EnvFilter{Labels: sel, Active: !all && len(states) == 0, WithCommands: asJSON || !quiet}
			for _, s := range states {
				switch st := hostfork.EnvState(s); st {
				case hostfork.EnvCreating, hostfork.EnvActive, hostfork.EnvStopping, hostfork.EnvStopped, hostfork.EnvFailed:
					f.States = append(f.States, st)
				default:
					return usageErr("--state %q: use creating, active, stopping, stopped or failed", s)
				}
			}
			envs, err := h.Envs(c.Context(), f)
			if err != nil {
				return err
			}
			if !g.showEnv {
				for i := range envs {
					envs[i] = hostfork.RedactEnv(envs[i])
				}
			}
			if asJSON {
				return printJSON(g.out, envs)
			}
			if quiet {
				for _, e := range envs {
					fmt.Fprintln(g.out, e.ID)
				}
				return nil
			}
			tw := newTable(g.out)
			fmt.Fprintln(tw, "ID\tSTATE\tTIER\tAGE\tDEADLINE\tCOMMANDS\tTREES\tPURPOSE")
			for _, e := range envs {
				state := string(e.State)
				if e.StopReason != "" {
					state += " (" + string(e.StopReason) + ")"
				}
				if e.Due != "" {
					state += " [due: " + clean(e.Due) + "]"
				}
				dl := "-"
				switch {
				case e.UntilStopped:
					dl = "until stopped"
				case e.DeadlineAt != nil:
					dl = tstr(e.DeadlineAt)
					if e.Expired {
						dl += " (passed)"
					}
				}
				live := 0
				for _, c := range e.Commands {
					if c.Liveness != hostfork.Exited {
						live++
					}
				}
				trees := 0
				for _, t := range e.Trees {
					if t.State == hostfork.TreeAllocated {
						trees++
					}
				}
				why := whyText(e.Purpose, e.Labels)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d live / %d\t%d\t%s\n", e.ID, state, e.Tier, age(e.CreatedAt), dl, live, len(e.Commands), trees, why)
			}
			return tw.Flush()
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "include stopped and failed environments")
	c.Flags().StringArrayVar(&states, "state", nil, "only environments in this state (creating, active, stopping, stopped, failed); repeatable")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	c.Flags().BoolVar(&g.showEnv, "show-env", false, "show the values of explicit environment variables (hidden by default: they may be secrets)")
	sf.add(c, "environments")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (an array of environment records)")
	return c
}

// whyText is a listing's PURPOSE column: the purpose and the labels ("-"
// when neither is given).
func whyText(purpose string, labels map[string]string) string {
	why := clean(purpose)
	if l := labelText(labels); l != "" && why != "" {
		why += " " + l
	} else if l != "" {
		why = l
	}
	return cmp.Or(why, "-")
}
