package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/spec"
)

// hostShellCacheDir is where the login-shell capture is cached.
func (e *Engine) hostShellCacheDir() string { return filepath.Join(e.root, "cache") }

// RecaptureHostShell captures the login shell's environment again and
// replaces the cached capture that the host-shell and toolchain policies
// use. A failed capture leaves the cache as it was.
func (e *Engine) RecaptureHostShell(ctx context.Context) error {
	_, err := launchenv.HostShell(ctx, launchenv.HostShellOptions{CacheDir: e.hostShellCacheDir(), Refresh: true, Inherited: os.Environ()})
	return err
}

// launchOf is the launch part (env_policy, env) of a stored request; what
// does not decode is left out.
func launchOf(raw json.RawMessage) spec.Launch {
	var full struct{ spec.Launch }
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &full)
	}
	return full.Launch
}

// commandEnv resolves a command's environment (DESIGN.md, "Launch
// environment policy"). An explicit cs.Env is used as given; otherwise the
// policy is the command's EnvPolicy, else the environment spec's
// env_policy, else inherit. The spec's env, then cs.EnvSet, are applied
// last. note is set when the policy could not be followed (the login-shell
// capture failed and the environment was left unchanged). keys names the
// variables set explicitly.
func (e *Engine) commandEnv(ctx context.Context, envRec *api.Env, cs *CommandSpec) (env []string, policy, note string, keys []string, err error) {
	launch := launchOf(envRec.Spec)
	explicit := append(launchenv.ExplicitFromMap(launch.Env), cs.EnvSet...)
	for _, kv := range explicit {
		k, _, _ := cutEq(kv)
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if cs.Env != nil {
		// Given explicitly: kept exactly, Git variables included.
		env, err := launchenv.Merge(cs.Env, explicit)
		if err != nil {
			return nil, "", "", nil, fmt.Errorf("%v: %w", err, api.ErrInvalid)
		}
		return env, "", "", keys, nil
	}
	policy = cs.EnvPolicy
	if policy == "" {
		policy = launch.EnvPolicy
	}
	if policy == "" {
		policy = spec.EnvInherit
	}
	if !spec.ValidEnvPolicy(policy) {
		return nil, "", "", nil, fmt.Errorf("environment policy %q: use inherit, clean, host-shell or toolchain: %w", policy, api.ErrInvalid)
	}
	in := launchenv.Input{Policy: policy, Inherited: os.Environ(), Explicit: explicit}
	if policy == spec.EnvClean {
		in.Account, _ = launchenv.CurrentAccount()
	}
	if launchenv.NeedsShell(policy) {
		snap, err := launchenv.HostShell(ctx, launchenv.HostShellOptions{CacheDir: e.hostShellCacheDir(), Inherited: in.Inherited})
		if err != nil {
			in.ShellErr = err
		} else {
			in.Shell = snap.Env
		}
	}
	res, err := launchenv.Resolve(in)
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("%v: %w", err, api.ErrInvalid)
	}
	return res.Env, policy, res.Note, keys, nil
}

func cutEq(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
