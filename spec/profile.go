package spec

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// ProfileAgent is the built-in profile for coding agents: what an agent
// writes outside its project stays in the environment.
const ProfileAgent = "agent"

// Profile is a named set of view rules, with the trees its replace rules
// name: data a spec takes by name (Environment.Profile), so operators can
// write their own under the spec's profiles. A path (a view target or a
// tree's source) may begin with $HOME, the home directory of the user who
// plans the environment.
type Profile struct {
	Trees map[string]Tree `json:"trees,omitempty" yaml:"trees,omitempty"`
	View  View            `json:"view" yaml:"view,omitempty"`
}

// BuiltinProfiles are the profiles every spec may name.
func BuiltinProfiles() map[string]Profile {
	return map[string]Profile{
		ProfileAgent: {
			Trees: map[string]Tree{"home": {Kind: KindOverlay, Source: "$HOME"}},
			View: View{
				Replace:      map[string]string{"$HOME": "home"},
				Scratch:      []string{"/tmp", "/var/tmp", "/dev/shm"},
				ReadOnlyRest: true,
			},
		},
	}
}

// ApplyProfile merges the profile e names into e's trees and view, with
// $HOME standing for home. The spec's own rules win: a path the spec
// already rules keeps its rule, and the profile's replace rule for it
// (with its tree) is left out, so applying a profile twice changes
// nothing. A profile defined in e.Profiles takes precedence over a
// built-in one of the same name.
func (e *Environment) ApplyProfile(home string) error {
	if e.Profile == "" {
		if len(e.Profiles) > 0 {
			return fmt.Errorf("profiles are defined but none is chosen; set profile (or --profile NAME): %w", ErrInvalid)
		}
		return nil
	}
	p, ok := e.Profiles[e.Profile]
	if !ok {
		p, ok = BuiltinProfiles()[e.Profile]
	}
	if !ok {
		names := append(slices.Collect(maps.Keys(e.Profiles)), ProfileAgent)
		slices.Sort(names)
		return fmt.Errorf("profile %q is not defined; use one of %s, or define it under profiles: %w", e.Profile, strings.Join(names, ", "), ErrInvalid)
	}
	expand := func(s string) (string, error) {
		rest, ok := strings.CutPrefix(s, "$HOME")
		if !ok {
			rest, ok = strings.CutPrefix(s, "${HOME}")
		}
		if !ok {
			return s, nil
		}
		if rest != "" && !strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("profile %s: %q: $HOME must be followed by '/' or nothing: %w", e.Profile, s, ErrInvalid)
		}
		if !filepath.IsAbs(home) || filepath.Clean(home) == "/" {
			return "", fmt.Errorf("profile %s needs the user's home directory, but it is %q; set HOME (or env HOME in the spec) to an absolute path other than /: %w", e.Profile, home, ErrInvalid)
		}
		return filepath.Clean(home + rest), nil
	}
	ruled := map[string]bool{}
	for t := range e.View.Replace {
		ruled[filepath.Clean(t)] = true
	}
	for _, l := range [][]string{e.View.ReadOnly, e.View.Share, e.View.Scratch} {
		for _, t := range l {
			ruled[filepath.Clean(t)] = true
		}
	}
	add := func(dst *[]string, src []string) error {
		for _, t := range src {
			x, err := expand(t)
			if err != nil {
				return err
			}
			if !ruled[filepath.Clean(x)] {
				ruled[filepath.Clean(x)] = true
				*dst = append(*dst, x)
			}
		}
		return nil
	}
	for _, t := range slices.Sorted(maps.Keys(p.View.Replace)) {
		x, err := expand(t)
		if err != nil {
			return err
		}
		if ruled[filepath.Clean(x)] {
			continue
		}
		name := p.View.Replace[t]
		tr, ok := p.Trees[name]
		if !ok {
			return fmt.Errorf("profile %s: replace %s names no tree %q (define it under the profile's trees): %w", e.Profile, t, name, ErrInvalid)
		}
		if _, clash := e.Trees[name]; clash {
			return fmt.Errorf("profile %s defines tree %q, which the spec defines too; rename the spec's tree: %w", e.Profile, name, ErrInvalid)
		}
		if tr.Source, err = expand(tr.Source); err != nil {
			return err
		}
		if e.Trees == nil {
			e.Trees = map[string]Tree{}
		}
		if e.View.Replace == nil {
			e.View.Replace = map[string]string{}
		}
		e.Trees[name] = tr
		e.View.Replace[x] = name
		ruled[filepath.Clean(x)] = true
	}
	if err := add(&e.View.Scratch, p.View.Scratch); err != nil {
		return err
	}
	if err := add(&e.View.ReadOnly, p.View.ReadOnly); err != nil {
		return err
	}
	if err := add(&e.View.Share, p.View.Share); err != nil {
		return err
	}
	e.View.ReadOnlyRest = e.View.ReadOnlyRest || p.View.ReadOnlyRest
	e.View.AllowUntrustedTargets = e.View.AllowUntrustedTargets || p.View.AllowUntrustedTargets
	return nil
}
