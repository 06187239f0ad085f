package hostfork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/spec"
)

// hostShellCacheDir is where the login-shell capture is cached.
func (h *Host) hostShellCacheDir() string { return filepath.Join(h.root, "cache") }

// RecaptureHostShell captures the login shell's environment again and
// replaces the cached capture that the host-shell and toolchain policies
// use (after the user changed their shell startup files, say). A failed
// capture leaves the cache as it was.
func (h *Host) RecaptureHostShell(ctx context.Context) error {
	_, err := launchenv.HostShell(ctx, launchenv.HostShellOptions{CacheDir: h.hostShellCacheDir(), Refresh: true, Inherited: os.Environ()})
	return err
}

// commandEnv resolves a command's environment (DESIGN.md, "Launch
// environment policy"). An explicit Command.Env is used as given;
// otherwise the policy is the command's EnvPolicy, else the environment
// spec's env_policy, else inherit. The spec's env, then Command.EnvSet, are
// applied last. note is set when the policy could not be followed (the
// login-shell capture failed and the environment was left unchanged).
func (h *Host) commandEnv(ctx context.Context, envRec *Env, c *Command) (env []string, policy, note string, err error) {
	var launch struct{ spec.Launch }
	rec := envRec.Record()
	if len(rec.Spec) > 0 {
		_ = json.Unmarshal(rec.Spec, &launch)
	}
	explicit := append(launchenv.ExplicitFromMap(launch.Env), c.EnvSet...)
	if c.Env != nil {
		// Given explicitly: kept exactly, Git variables included.
		env, err := launchenv.Merge(c.Env, explicit)
		if err != nil {
			return nil, "", "", fmt.Errorf("%v: %w", err, ErrInvalid)
		}
		return env, "", "", nil
	}
	policy = c.EnvPolicy
	if policy == "" {
		policy = launch.EnvPolicy
	}
	if policy == "" {
		policy = spec.EnvInherit
	}
	if !spec.ValidEnvPolicy(policy) {
		return nil, "", "", fmt.Errorf("environment policy %q: use inherit, clean, host-shell or toolchain: %w", policy, ErrInvalid)
	}
	in := launchenv.Input{Policy: policy, Inherited: os.Environ(), Explicit: explicit}
	if policy == spec.EnvClean {
		in.Account, _ = launchenv.CurrentAccount()
	}
	if launchenv.NeedsShell(policy) {
		snap, err := launchenv.HostShell(ctx, launchenv.HostShellOptions{CacheDir: h.hostShellCacheDir(), Inherited: in.Inherited})
		if err != nil {
			in.ShellErr = err
		} else {
			in.Shell = snap.Env
		}
	}
	res, err := launchenv.Resolve(in)
	if err != nil {
		return nil, "", "", fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	return res.Env, policy, res.Note, nil
}
