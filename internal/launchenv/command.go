package launchenv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
)

// launchOf is the launch part (env_policy, env) of a stored request; what
// does not decode is left out.
func launchOf(raw json.RawMessage) spec.Launch {
	var full struct{ spec.Launch }
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &full)
	}
	return full.Launch
}

// CommandSpec is what resolving one command's environment reads of its
// request.
type CommandSpec struct {
	Env       []string // an explicit environment, used as given
	EnvSet    []string // variables set on top of it
	EnvPolicy string
}

// CommandEnv resolves a command's environment (DESIGN.md, "Launch
// environment policy"). An explicit cs.Env is used as given; otherwise the
// policy is the command's EnvPolicy, else the environment spec's
// env_policy, else inherit. The spec's env, then cs.EnvSet, are applied
// last. note is set when the policy could not be followed (the login-shell
// capture failed and the environment was left unchanged). keys names the
// variables set explicitly.
// cacheDir holds the login-shell capture; envSpec is the environment's
// stored request.
func CommandEnv(ctx context.Context, cacheDir string, envSpec json.RawMessage, cs CommandSpec) (env []string, policy, note string, keys []string, err error) {
	launch := launchOf(envSpec)
	explicit := append(ExplicitFromMap(launch.Env), cs.EnvSet...)
	for _, kv := range explicit {
		k, _, _ := cutEq(kv)
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if cs.Env != nil {
		// Given explicitly: kept exactly, Git variables included.
		env, err := Merge(cs.Env, explicit)
		if err != nil {
			return nil, "", "", nil, fmt.Errorf("%v: %w", err, api.ErrInvalid)
		}
		return env, "", "", keys, nil
	}
	policy = cmp.Or(cs.EnvPolicy, launch.EnvPolicy, spec.EnvInherit)
	if !spec.ValidEnvPolicy(policy) {
		return nil, "", "", nil, fmt.Errorf("environment policy %q: use inherit, clean, host-shell or toolchain: %w", policy, api.ErrInvalid)
	}
	in := Input{Policy: policy, Inherited: os.Environ(), Explicit: explicit}
	if policy == spec.EnvClean {
		in.Account, _ = CurrentAccount()
	}
	if NeedsShell(policy) {
		snap, err := HostShell(ctx, HostShellOptions{CacheDir: cacheDir, Inherited: in.Inherited})
		if err != nil {
			in.ShellErr = err
		} else {
			in.Shell = snap.Env
		}
	}
	res, err := Resolve(in)
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
