package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/doctor"
)

// admitFlags select admission for a command.
type admitFlags struct {
	workload string
	admit    string
}

func (f *admitFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.workload, "workload", "", "workload kind: agent (takes part in admission, reserves at least 2 GiB)")
	c.Flags().StringVar(&f.admit, "admit", "", "when the host is full or paused: wait (default for agents), fail, or skip admission")
}

func (f *admitFlags) apply(cmd *launchReq, g *globals) error {
	if f.admit != "" && f.workload == "" {
		f.workload = hostfork.WorkloadAgent
	}
	switch f.workload {
	case "", hostfork.WorkloadAgent:
	default:
		return usageErr("--workload %q: the only kind is agent", f.workload)
	}
	switch f.admit {
	case "", hostfork.AdmitWait, hostfork.AdmitFail, hostfork.AdmitSkip:
	default:
		return usageErr("--admit %q: use wait, fail or skip", f.admit)
	}
	cmd.workload = f.workload
	cmd.admit = f.admit
	cmd.onAdmissionWait = func(reason string) {
		fmt.Fprintf(g.err, "hostfork: waiting for admission: %s\n", reason)
	}
	return nil
}

func newCapacityCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "capacity",
		Short: "Logical cores, available memory, the admission share, live agent workloads and free slots",
		Args:  exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			r, err := h.Capacity(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, r)
			}
			mem := "unknown (no memory telemetry: one slot)"
			if r.MemAvailable != nil {
				mem = doctor.Human(int64(*r.MemAvailable))
			}
			fmt.Fprintf(g.out, "cores: %d   available memory: %s   share: %.0f%%\n", r.Cores, mem, r.Share*100)
			fmt.Fprintf(g.out, "slots: %d (bound by %s)   used: %d   free: %d", r.Slots, r.Bound, r.Used, r.Free)
			if r.Paused {
				fmt.Fprint(g.out, "   ADMISSION PAUSED ('hostfork resume')")
			}
			fmt.Fprintln(g.out)
			if len(r.Live) > 0 {
				tw := newTable(g.out)
				fmt.Fprintln(tw, "COMMAND\tENV\tRESERVED\tWHY\tSAMPLE\tARGV")
				for i, w := range r.Live {
					res, why := "-", "-"
					if i < len(r.Reservations) {
						res, why = doctor.Human(int64(r.Reservations[i].Bytes)), r.Reservations[i].Reason
					}
					sample := "none"
					if w.Sample != nil {
						sample = fmt.Sprintf("%s %s complete=%v stable=%v", doctor.Human(int64(w.Sample.Bytes)), w.Sample.Source, w.Sample.Complete, w.Sample.Stable)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.Command, w.Env, res, why, sample, shortArgv(w.Argv))
				}
				return tw.Flush()
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newPauseCmd(g *globals, pause bool) *cobra.Command {
	use, short := "pause", "Stop admitting new agent workloads (running work continues)"
	if !pause {
		use, short = "resume", "Admit new agent workloads again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			if err := h.SetPaused(c.Context(), pause); err != nil {
				return err
			}
			state := "paused: new agent workloads wait (or fail with --admit fail); running work continues"
			if !pause {
				state = "resumed: admission is open"
			}
			fmt.Fprintln(g.out, "admission "+state)
			return nil
		}),
	}
}
