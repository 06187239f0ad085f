package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/store"
	"github.com/habemus-papadum/hostfork/internal/support"
)

type supportFlags struct {
	user, system, asJSON bool
}

func newSupportCmd(g *globals) *cobra.Command {
	f := &supportFlags{}
	c := &cobra.Command{
		Use:   "support plan|install|status|uninstall [--user|--system]",
		Short: "Optional host integration: a reaper timer, a finalizer template and the API server's socket for this store",
		Long: `support manages hostfork's optional host integration for one store root: a
versioned reaper service and timer (hostfork-reap.service runs
'hostfork --root ROOT reap' every minute), a finite finalizer service
template (hostfork-finalize@ENV.service; it runs a full reap, since reap takes
no environment argument), and the API server (hostfork-serve.socket listens
on ROOT/api.sock, mode 0660; its first connection starts
hostfork-serve.service, 'hostfork --root ROOT serve', which environments made
through it outlive). --system installs into /etc/systemd/system (the
default for root), --user into ~/.config/systemd/user (the default otherwise).

'plan' shows exactly which files it writes, their contents and the systemctl
commands, and what it never does: format storage, change sysctls, enable
lingering, or remove retained data. 'install' writes and enables exactly
that, and changes nothing when run again. 'status' shows each unit's file,
whether it runs this executable and version (a moved or stale binary is a
finding, exit 1) and what systemctl says. 'uninstall' lists the active runs
whose recovery path it removes, then disables and removes only its own files.

Without systemd (PID 1 is not systemd), 'plan' says so and gives the
alternatives: a cron line or 'hostfork reap --watch' under your own
supervisor; 'install' exits 121.`,
		Args: exactArgs(0, "a subcommand: plan, install, status or uninstall"),
		RunE: func(c *cobra.Command, args []string) error { return c.Help() },
	}
	c.PersistentFlags().BoolVar(&f.user, "user", false, "the calling user's manager (~/.config/systemd/user)")
	c.PersistentFlags().BoolVar(&f.system, "system", false, "the system manager (/etc/systemd/system)")
	c.PersistentFlags().BoolVar(&f.asJSON, "json", false, "print JSON")
	c.AddCommand(
		&cobra.Command{Use: "plan [--user|--system]", Short: "Show exactly what install would write and run",
			Args: exactArgs(0, "no arguments"), RunE: func(c *cobra.Command, _ []string) error { return supportPlan(c.Context(), g, f) }},
		&cobra.Command{Use: "install [--user|--system]", Short: "Write and enable the planned units (idempotent)",
			Args: exactArgs(0, "no arguments"), RunE: func(c *cobra.Command, _ []string) error { return supportInstall(c.Context(), g, f) }},
		&cobra.Command{Use: "status [--user|--system]", Short: "Show the installed units and what is wrong with them",
			Args: exactArgs(0, "no arguments"), RunE: func(c *cobra.Command, _ []string) error { return supportStatus(c.Context(), g, f) }},
		&cobra.Command{Use: "uninstall [--user|--system]", Short: "List active runs, then disable and remove the units (never data)",
			Args: exactArgs(0, "no arguments"), RunE: func(c *cobra.Command, _ []string) error { return supportUninstall(c.Context(), g, f) }},
	)
	return c
}

// buildSupportPlan resolves the mode, executable, store root and version
// and plans for them.
func buildSupportPlan(g *globals, f *supportFlags) (*support.Plan, error) {
	if f.user && f.system {
		return nil, usageErr("--user and --system exclude each other")
	}
	mode := support.User
	if f.system || (!f.user && os.Geteuid() == 0) {
		mode = support.System
	}
	exe, err := support.Executable()
	if err != nil {
		return nil, err
	}
	root := g.root
	if root == "" {
		if root, err = hostfork.DefaultRoot(); err != nil {
			return nil, err
		}
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, usageErr("--root: %v", err)
	}
	name := ""
	if a, err := launchenv.CurrentAccount(); err == nil {
		name = a.Name
	}
	builtin, _ := store.BuiltinRoot()
	p, err := support.Build(support.Config{Mode: mode, Exe: exe, Root: root, Version: buildVersion(exe), UserName: name,
		DefaultStore: builtin != "" && filepath.Clean(builtin) == root},
		support.Detect(mode, name))
	if err != nil {
		return nil, withCode(ExitUsage, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), CompanionName)); err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("%s is missing beside %s: %s would fail at its socket's first connection ('hostfork serve' executes it); install will refuse until it is built there with 'go build -o %s/ ./cmd/hostfork-serve'",
			CompanionName, exe, p.Units.ServeService, filepath.Dir(exe)))
	}
	return p, nil
}

// buildVersion identifies this build for the units: the module version,
// the commit and whether the tree was dirty, as far as they are known; a
// build that is not a release also gets a digest of the executable, so that
// two "(devel)" builds are told apart.
func buildVersion(exe string) string {
	b := ReadBuildInfo()
	v := cmp.Or(b.Version, "(devel)")
	if b.Commit != "unknown" && b.Commit != "" {
		v += " " + b.Commit[:min(12, len(b.Commit))]
	}
	if b.Dirty != nil && *b.Dirty {
		v += "+dirty"
	}
	if b.Kind != "release" {
		if f, err := os.Open(exe); err == nil {
			h := sha256.New()
			if _, err := io.Copy(h, f); err == nil {
				v += fmt.Sprintf(" sha256:%x", h.Sum(nil)[:6])
			}
			f.Close()
		}
	}
	return v
}

func supportErr(err error) error {
	switch {
	case errors.Is(err, support.ErrNoSystemd):
		return withCode(ExitCapability, err)
	case errors.Is(err, support.ErrUnstableExecutable), errors.Is(err, support.ErrInvalid):
		return withCode(ExitUsage, err)
	case errors.Is(err, support.ErrConflict):
		return withCode(ExitFailed, err)
	}
	return err
}

func supportPlan(ctx context.Context, g *globals, f *supportFlags) error {
	p, err := buildSupportPlan(g, f)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(g.out, p)
	}
	w := g.out
	printPlanHeader(w, p)
	if !p.Systemd {
		fmt.Fprintf(w, "\nno systemd manager for --%s: %s\n'support install' will refuse (exit %d). Instead, run the reaper with one of:\n", p.Mode, p.NoSystemd, ExitCapability)
		for _, a := range p.Alternatives {
			fmt.Fprintf(w, "  - %s\n", a)
		}
		fmt.Fprintf(w, "\nOn a host with systemd, install would write these files:\n")
	} else {
		fmt.Fprintf(w, "\nfiles (mode 0644, written atomically; uninstall removes exactly these):\n")
	}
	for _, file := range p.Files {
		fmt.Fprintf(w, "\n--- %s\n%s", file.Path, file.Content)
	}
	fmt.Fprintf(w, "\ncommands install runs:\n")
	for _, cmd := range p.Install {
		fmt.Fprintf(w, "  %s\n", strings.Join(cmd, " "))
	}
	fmt.Fprintf(w, "commands uninstall runs (it lists active runs first, and removes the files between them):\n")
	for _, cmd := range p.Uninstall {
		fmt.Fprintf(w, "  %s\n", strings.Join(cmd, " "))
	}
	fmt.Fprintf(w, "notes:\n")
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	fmt.Fprintf(w, "never:\n")
	for _, n := range p.Never {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	return nil
}

func printPlanHeader(w io.Writer, p *support.Plan) {
	fmt.Fprintf(w, "mode:           --%s\nexecutable:     %s\nversion:        %s\nstore root:     %s\nunit directory: %s\n",
		p.Mode, p.Executable, p.Version, p.Root, p.UnitDir)
}

func supportInstall(ctx context.Context, g *globals, f *supportFlags) error {
	p, err := buildSupportPlan(g, f)
	if err != nil {
		return err
	}
	if p.Systemd {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p.Executable), CompanionName)); err != nil {
			return withCode(ExitCapability, fmt.Errorf("support install: %s is missing beside %s, and %s runs it ('hostfork serve' executes it): build it there with 'go build -o %s/ ./cmd/hostfork-serve'; nothing was written",
				CompanionName, p.Executable, p.Units.ServeService, filepath.Dir(p.Executable)))
		}
		// The API socket is made inside the store root: the store must
		// exist first (a directory holding only a socket is no store).
		h, err := hostfork.Open(ctx, hostfork.Options{Root: p.Root})
		if err != nil {
			return err
		}
		h.Close()
	}
	res, err := support.Install(ctx, p, support.ExecRunner)
	if err != nil {
		if errors.Is(err, support.ErrNoSystemd) && !f.asJSON {
			fmt.Fprintf(g.out, "no systemd manager for --%s: %s\nnothing was written. Run the reaper with one of:\n", p.Mode, p.NoSystemd)
			for _, a := range p.Alternatives {
				fmt.Fprintf(g.out, "  - %s\n", a)
			}
			return withCode(ExitCapability, fmt.Errorf("support install --%s: no systemd manager (%s); use one of the alternatives above", p.Mode, p.NoSystemd))
		}
		return supportErr(err)
	}
	if f.asJSON {
		return printJSON(g.out, res)
	}
	if !res.Changed {
		fmt.Fprintf(g.out, "already installed for %s: nothing changed\n", p.Root)
		return nil
	}
	for _, path := range res.Written {
		fmt.Fprintf(g.out, "wrote     %s\n", path)
	}
	for _, path := range res.Unchanged {
		fmt.Fprintf(g.out, "unchanged %s\n", path)
	}
	for _, cmd := range res.Ran {
		fmt.Fprintf(g.out, "ran       %s\n", strings.Join(cmd, " "))
	}
	return nil
}

func supportStatus(ctx context.Context, g *globals, f *supportFlags) error {
	p, err := buildSupportPlan(g, f)
	if err != nil {
		return err
	}
	s, err := support.Inspect(ctx, p, support.ExecRunner)
	if err != nil {
		return err
	}
	if f.asJSON {
		if err := printJSON(g.out, s); err != nil {
			return err
		}
	} else {
		printPlanHeader(g.out, p)
		if !p.Systemd {
			fmt.Fprintf(g.out, "systemd:        none (%s)\n", p.NoSystemd)
		}
		for _, u := range s.Units {
			switch {
			case !u.Present:
				fmt.Fprintf(g.out, "%-27s not installed\n", u.Unit)
			default:
				state := ""
				if u.Enabled != "" {
					state = " is-enabled=" + u.Enabled
				}
				if u.Active != "" {
					state += " is-active=" + u.Active
				}
				fmt.Fprintf(g.out, "%-27s present (up to date: %v)%s\n", u.Unit, u.UpToDate, state)
				if u.Executable != "" {
					fmt.Fprintf(g.out, "%-27s runs %s (hostfork %s, root %s)\n", "", u.Executable, u.Version, u.Root)
				}
			}
		}
		for _, x := range s.Findings {
			fmt.Fprintf(g.out, "finding: %s\n", x)
		}
		switch {
		case s.Installed && len(s.Findings) == 0:
			fmt.Fprintln(g.out, "installed and current")
		case !s.Installed && len(s.Findings) == 0:
			fmt.Fprintln(g.out, "not installed (see 'hostfork support plan')")
		}
	}
	if len(s.Findings) > 0 {
		return withCode(ExitFailed, nil)
	}
	return nil
}

func supportUninstall(ctx context.Context, g *globals, f *supportFlags) error {
	p, err := buildSupportPlan(g, f)
	if err != nil {
		return err
	}
	// Active runs lose their recovery path: say which, before removing it.
	var rows []hostfork.CommandRecord
	if st, err := os.Stat(filepath.Join(p.Root, "registry.sqlite")); err == nil && !st.IsDir() {
		h, err := hostfork.Open(ctx, hostfork.Options{Root: p.Root})
		if err != nil {
			return err
		}
		rows, err = h.Commands(ctx, hostfork.CommandFilter{Live: true})
		h.Close()
		if err != nil {
			return err
		}
	}
	switch {
	case f.asJSON:
	case len(rows) == 0:
		fmt.Fprintf(g.out, "no active runs in %s\n", p.Root)
	default:
		fmt.Fprintf(g.out, "%d active run(s) in %s lose their periodic recovery; after this, run 'hostfork --root %s reap' yourself if hostfork or the host crashes:\n", len(rows), p.Root, p.Root)
		for _, r := range rows {
			fmt.Fprintf(g.out, "  %s (environment %s) %s: %s\n", r.ID, r.Env, r.Liveness, cleanArgv(r.Argv, 0))
		}
	}
	res, err := support.Uninstall(ctx, p, support.ExecRunner)
	if err != nil {
		return supportErr(err)
	}
	if f.asJSON {
		return printJSON(g.out, struct {
			ActiveRuns []hostfork.CommandRecord `json:"active_runs"`
			*support.UninstallResult
		}{append([]hostfork.CommandRecord{}, rows...), res})
	}
	for _, step := range res.Steps {
		fmt.Fprintln(g.out, step)
	}
	for _, k := range res.Kept {
		fmt.Fprintf(g.out, "kept    %s\n", k)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(g.out, "warning: %s\n", w)
	}
	if len(res.Removed) == 0 {
		fmt.Fprintln(g.out, "nothing of hostfork's was installed")
	}
	fmt.Fprintf(g.out, "retained data in %s is kept\n", p.Root)
	return nil
}
