package spec

import (
	"fmt"
	"strings"
)

// Launch environment policies (DESIGN.md, "Launch environment policy").
const (
	// EnvInherit gives commands the caller's environment (the default).
	EnvInherit = "inherit"
	// EnvClean gives a minimal environment: a standard PATH, HOME, USER,
	// LOGNAME, the locale (LANG, LC_*) and TERM.
	EnvClean = "clean"
	// EnvHostShell gives the user's login-shell environment, captured once
	// and reused (for agents: a daemon may never have had it).
	EnvHostShell = "host-shell"
	// EnvToolchain keeps the inherited environment and overlays only PATH
	// and the non-secret toolchain discovery variables from the login
	// shell (for quality checks).
	EnvToolchain = "toolchain"
)

// Launch says how the environment's commands are launched. It is embedded
// in Environment, so its fields appear at the top level of a spec file.
type Launch struct {
	// EnvPolicy is inherit (default), clean, host-shell or toolchain.
	EnvPolicy string `json:"env_policy,omitempty" yaml:"env_policy,omitempty"`
	// Env holds variables set explicitly for every command, applied after
	// the policy. They are the explicit way to pass a Git redirection
	// (GIT_DIR, ...), which every policy otherwise removes.
	Env map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
}

// ValidEnvPolicy reports whether p names a policy ("" is the default).
func ValidEnvPolicy(p string) bool {
	switch p {
	case "", EnvInherit, EnvClean, EnvHostShell, EnvToolchain:
		return true
	}
	return false
}

// ValidEnvName reports whether k can be an environment variable's name.
func ValidEnvName(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

// MayChangePath reports whether commands may see a PATH other than the
// caller's, so that resolving a program against the caller's PATH before
// launch proves nothing.
func (l Launch) MayChangePath() bool {
	_, explicit := l.Env["PATH"]
	return (l.EnvPolicy != "" && l.EnvPolicy != EnvInherit) || explicit
}

func (l Launch) validateLaunch() error {
	if !ValidEnvPolicy(l.EnvPolicy) {
		return fmt.Errorf("env_policy %q: use inherit, clean, host-shell or toolchain: %w", l.EnvPolicy, ErrInvalid)
	}
	for k, v := range l.Env {
		if !ValidEnvName(k) {
			return fmt.Errorf("env: variable name %q must be non-empty and contain no '=': %w", k, ErrInvalid)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("env: the value of %s contains a NUL byte: %w", k, ErrInvalid)
		}
	}
	return nil
}
