// Package spec defines hostfork's request types: what an environment is
// asked to be (lifetime, labels, and later trees, view and limits), with one
// Validate. Spec files (YAML or JSON) and CLI flags compile to these types.
// It is pure data: it imports nothing from hostfork and touches no OS state,
// so any package, including non-Linux ones, may import it.
package spec

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// ErrInvalid wraps every validation error (it is api.ErrInvalid).
var ErrInvalid = api.ErrInvalid

// Duration is a time.Duration written as a Go duration string ("20m",
// "1h30m", "2s") in spec files (it is api.Duration).
type Duration = api.Duration

// ParseDuration is time.ParseDuration that also accepts a "d" (24h) unit
// and rejects negative values.
func ParseDuration(s string) (time.Duration, error) { return api.ParseDuration(s) }

// Owner-exit policies.
const (
	OwnerExitStop   = "stop"
	OwnerExitDetach = "detach"
)

// Lifetime bounds an environment (DESIGN.md, "Linux execution": Deadline).
type Lifetime struct {
	// MaxRuntime runs from environment activation to force-stop, grace
	// included. Zero with UntilStopped false means "not chosen".
	MaxRuntime Duration `json:"max_runtime,omitempty" yaml:"max_runtime,omitempty"`
	// UntilStopped explicitly asks for no deadline.
	UntilStopped bool `json:"until_stopped,omitempty" yaml:"until_stopped,omitempty"`
	// Grace is the termination grace inside every stop (default 2s).
	Grace Duration `json:"grace,omitempty" yaml:"grace,omitempty"`
	// OwnerExit is what happens when the creating process exits: stop
	// (default) or detach.
	OwnerExit string `json:"owner_exit,omitempty" yaml:"owner_exit,omitempty"`
	// IdleTimeout stops a command tree after this long without output or
	// forwarded signals, counted from its start before any activity.
	IdleTimeout Duration `json:"idle_timeout,omitempty" yaml:"idle_timeout,omitempty"`
}

// DefaultGrace is the termination grace when none is given.
const DefaultGrace = 2 * time.Second

// Environment is a request for one environment.
type Environment struct {
	Purpose  string            `json:"purpose,omitempty" yaml:"purpose,omitempty"`
	Labels   map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Lifetime Lifetime          `json:"lifetime" yaml:"lifetime"`
	// Tier asks for an ownership tier: "" (best available), "cgroup2" or
	// "subreaper" (an explicit choice of the weaker tier).
	Tier      string          `json:"tier,omitempty" yaml:"tier,omitempty"`
	Trees     map[string]Tree `json:"trees,omitempty" yaml:"trees,omitempty"`
	View      View            `json:"view" yaml:"view,omitempty"`
	Limits    Limits          `json:"limits" yaml:"limits,omitempty"`
	Retention Retention       `json:"retention" yaml:"retention,omitempty"`
	// Profile names a profile (a named set of view rules, spec/profile.go)
	// merged into Trees and View when the environment is planned: "agent"
	// or one defined under Profiles.
	Profile string `json:"profile,omitempty" yaml:"profile,omitempty"`
	// Profiles defines profiles this spec (or an operator's spec file) may
	// name, beside the built-in ones.
	Profiles map[string]Profile `json:"profiles,omitempty" yaml:"profiles,omitempty"`
	// Launch holds env_policy and env (spec/policy.go).
	Launch `yaml:",inline"`
}

// labelKey and treeName match `^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$` and
// `^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`. They are written out, not compiled
// regular expressions: package initialisation is paid at every CLI call,
// and those two cost a third of a millisecond there.
var (
	labelKey = nameMatcher("._/-")
	treeName = nameMatcher("_-")
)

// ValidLabelKey reports whether k can be a label's key.
func ValidLabelKey(k string) bool { return labelKey.MatchString(k) }

// nameMatcher matches 1 to 63 bytes: an ASCII letter or digit, then ASCII
// letters, digits or bytes of extra.
type nameMatcher string

func (extra nameMatcher) MatchString(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || strings.IndexByte(string(extra), c) < 0) {
			return false
		}
	}
	return true
}

// Validate checks the request and fills defaults (grace, owner exit).
func (e *Environment) Validate() error {
	l := &e.Lifetime
	l.Grace = cmp.Or(l.Grace, Duration(DefaultGrace))
	l.OwnerExit = cmp.Or(l.OwnerExit, OwnerExitStop)
	if l.OwnerExit != OwnerExitStop && l.OwnerExit != OwnerExitDetach {
		return fmt.Errorf("owner_exit %q: use stop or detach: %w", l.OwnerExit, ErrInvalid)
	}
	if l.UntilStopped && l.MaxRuntime > 0 {
		return fmt.Errorf("both a max runtime (--ttl) and until-stopped were given; choose one: %w", ErrInvalid)
	}
	if l.MaxRuntime > 0 && time.Duration(l.MaxRuntime) <= time.Duration(l.Grace) {
		return fmt.Errorf("max runtime %v must be longer than the grace %v (it includes the grace): %w", time.Duration(l.MaxRuntime), time.Duration(l.Grace), ErrInvalid)
	}
	if l.OwnerExit == OwnerExitDetach && l.MaxRuntime == 0 && !l.UntilStopped {
		return fmt.Errorf("a detached environment needs --ttl DUR or --until-stopped: %w", ErrInvalid)
	}
	for k := range e.Labels {
		if !labelKey.MatchString(k) {
			return fmt.Errorf("label key %q: use letters, digits, '.', '_', '-', '/' (max 63): %w", k, ErrInvalid)
		}
	}
	switch e.Tier {
	case "", "cgroup2", "systemd-scope", "subreaper":
	default:
		return fmt.Errorf("tier %q: use cgroup2, systemd-scope or subreaper: %w", e.Tier, ErrInvalid)
	}
	if err := e.validateLaunch(); err != nil {
		return err
	}
	return e.validateView()
}
