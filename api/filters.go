package api

import (
	"fmt"
	"strings"
)

// Selector matches labels: every term must hold. A term is "key=value"
// (the label is set to value) or "key" (the label is set).
type Selector []string

// ParseSelector splits "k1=v1,k2=v2" into a selector.
func ParseSelector(s string) (Selector, error) {
	var sel Selector
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if err := checkTerm(t); err != nil {
			return nil, err
		}
		sel = append(sel, t)
	}
	return sel, nil
}

func checkTerm(t string) error {
	k, _, _ := strings.Cut(t, "=")
	if k == "" {
		return fmt.Errorf("label selector %q: write key=value or key: %w", t, ErrInvalid)
	}
	return nil
}

// Validate checks every term.
func (s Selector) Validate() error {
	for _, t := range s {
		if err := checkTerm(t); err != nil {
			return err
		}
	}
	return nil
}

// Matches reports whether labels satisfy every term.
func (s Selector) Matches(labels map[string]string) bool {
	for _, t := range s {
		k, v, hasValue := strings.Cut(t, "=")
		got, ok := labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	return true
}

// EnvFilter selects environments. Zero fields select everything.
type EnvFilter struct {
	Labels Selector   `json:"labels,omitempty"`
	States []EnvState `json:"states,omitempty"`
	// Active selects environments that are not final (creating, active,
	// stopping) — by their state as a reader proves it now.
	Active bool `json:"active,omitempty"`
	// WithCommands fills each environment's Commands.
	WithCommands bool `json:"with_commands,omitempty"`
}

// CommandFilter selects commands. Zero fields select everything.
type CommandFilter struct {
	Env    string         `json:"env,omitempty"` // an environment id
	Labels Selector       `json:"labels,omitempty"`
	States []CommandState `json:"states,omitempty"`
	// Live selects commands whose tree is alive or unverified now.
	Live bool `json:"live,omitempty"`
	// Brief reads final commands for a listing: only id, env, rev, state,
	// created_at, purpose, labels, argv, dir, stdout_path, stderr_path,
	// exit_code, signal, stop_reason, stopped_by_hostfork, error and the
	// computed liveness, stoppable and pid are set; every other field is
	// zero (deadline_at too), lists and maps empty. Commands that are not final are read
	// and settled whole, as without Brief. It makes a table of many
	// retained commands several times cheaper ('hostfork ps --all'); a
	// server answers whole records whatever it is.
	Brief bool `json:"brief,omitempty"`
}
