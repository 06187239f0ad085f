package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/spec"
)

// launchEnvFlags choose a command's launch environment (DESIGN.md, "Launch
// environment policy"): --env-policy, --env K=V and --recapture-env, on
// run, shell, create (as the environment's default) and exec (per command).
type launchEnvFlags struct {
	envPolicy    string
	envVars      []string
	recaptureEnv bool
}

func (f *launchEnvFlags) add(c *cobra.Command, launches bool) {
	fl := c.Flags()
	fl.StringVar(&f.envPolicy, "env-policy", "", "launch environment: inherit (default), clean, host-shell (the login shell's, captured once) or toolchain (inherited, plus PATH and toolchain locations from the login shell)")
	fl.StringArrayVar(&f.envVars, "env", nil, "set variable K=V for the command (repeatable); the explicit way to pass GIT_DIR and other Git redirections, which every policy removes")
	if launches {
		fl.BoolVar(&f.recaptureEnv, "recapture-env", false, "capture the login shell's environment again instead of reusing the cached capture (host-shell, toolchain)")
	}
}

// apply puts the flags into a spec's launch settings.
func (f *launchEnvFlags) apply(l *spec.Launch) error {
	if f.envPolicy != "" {
		if !spec.ValidEnvPolicy(f.envPolicy) {
			return usageErr("--env-policy %q: use inherit, clean, host-shell or toolchain", f.envPolicy)
		}
		l.EnvPolicy = f.envPolicy
	}
	for _, kv := range f.envVars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !spec.ValidEnvName(k) {
			return usageErr("--env %q: write it as NAME=VALUE", kv)
		}
		if l.Env == nil {
			l.Env = map[string]string{}
		}
		l.Env[k] = v
	}
	return nil
}

// recapture refreshes the cached login-shell capture when asked. A failure
// is a warning: the launch goes on and reports how it resolved. Through a
// server (--host) it is refused: the server captures its own user's shell.
func (f *launchEnvFlags) recapture(ctx context.Context, g *globals, h backend) error {
	if !f.recaptureEnv {
		return nil
	}
	if g.remote() {
		return usageErr("--recapture-env can't go with --host: the server captures its own user's login shell (run 'hostfork run --recapture-env' on the server's host without --host)")
	}
	if err := h.RecaptureHostShell(ctx); err != nil {
		fmt.Fprintf(g.err, "hostfork: warning: --recapture-env: %v\n", err)
	}
	return nil
}

// warnEnvNote prints a started command's launch-environment note (a failed
// login-shell capture) as a warning; it is also in the command's record.
func warnEnvNote(g *globals, cmd launched) {
	if n := cmd.Record().EnvPolicyNote; n != "" {
		fmt.Fprintf(g.err, "hostfork: warning: %s\n", n)
	}
}
