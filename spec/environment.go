package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/habemus-papadum/hostfork/api"
)

// Tree kinds.
const (
	KindBtrfs   = "btrfs"
	KindOverlay = "overlay"
	KindCopy    = "copy"
	// KindWorktree is `git worktree add` of the repository at Source, at
	// Ref, on a new branch hostfork/ENV/TREE.
	KindWorktree = "worktree"
)

// Tree asks for one private tree.
type Tree struct {
	// Kind is btrfs, overlay or copy; selection is explicit, never a
	// silent fallback.
	Kind string `json:"kind" yaml:"kind"`
	// Baseline names a registered baseline (hostfork baseline add).
	Baseline string `json:"baseline,omitempty" yaml:"baseline,omitempty"`
	// Source is a host path used directly (overlay lower, copy source, or
	// btrfs subvolume to snapshot). Exactly one of Baseline and Source.
	Source string `json:"source,omitempty" yaml:"source,omitempty"`
	// Ref is what a worktree tree checks out: a branch, tag or commit
	// (default HEAD). Only for kind worktree.
	Ref string `json:"ref,omitempty" yaml:"ref,omitempty"`
}

// View describes how the environment's mount namespace differs from the
// host's (DESIGN.md, "Storage and the view").
type View struct {
	// Replace maps a host directory (the target) to a tree name.
	Replace map[string]string `json:"replace,omitempty" yaml:"replace,omitempty"`
	// ReadOnly paths are bind-mounted read-only onto themselves.
	ReadOnly []string `json:"read_only,omitempty" yaml:"read_only,omitempty"`
	// Share paths stay the host's live directories, restored on top of any
	// replacement or scratch that would hide them (e.g. a socket dir).
	Share []string `json:"share,omitempty" yaml:"share,omitempty"`
	// Scratch paths get a private, empty tmpfs (only when asked).
	Scratch []string `json:"scratch,omitempty" yaml:"scratch,omitempty"`
	// AllowUntrustedTargets accepts targets under a directory another
	// user can write (that user then chooses which of their directories
	// is covered); without it such a target is refused. Symbolic links
	// are never followed there either way.
	AllowUntrustedTargets bool `json:"allow_untrusted_targets,omitempty" yaml:"allow_untrusted_targets,omitempty"`
	// ReadOnlyRest makes every other writable host filesystem read-only:
	// each real filesystem mounted read-write that no rule covers or
	// shares (pseudo filesystems such as /proc, /sys and /dev keep their
	// modes). The agent profile sets it.
	ReadOnlyRest bool `json:"read_only_rest,omitempty" yaml:"read_only_rest,omitempty"`
}

// Empty reports whether the view changes nothing.
func (v View) Empty() bool {
	return len(v.Replace) == 0 && len(v.ReadOnly) == 0 && len(v.Share) == 0 && len(v.Scratch) == 0 && !v.ReadOnlyRest
}

// Limits are aggregate budgets over the environment (keeper included).
type Limits struct {
	Memory Size    `json:"memory,omitempty" yaml:"memory,omitempty"`
	CPUs   float64 `json:"cpus,omitempty" yaml:"cpus,omitempty"`
	Pids   int64   `json:"pids,omitempty" yaml:"pids,omitempty"`
	// AllowWeaker accepts limits the host can only partly enforce.
	AllowWeaker bool `json:"allow_weaker,omitempty" yaml:"allow_weaker,omitempty"`
}

// Empty reports whether no limit is asked for.
func (l Limits) Empty() bool { return l.Memory == 0 && l.CPUs == 0 && l.Pids == 0 }

// Retention says how long private trees and evidence are kept after the
// environment's confirmed stop (it is api.Retention).
type Retention = api.Retention

// Size is a byte count written as "512M", "8GiB", "1073741824".
type Size int64

// UnmarshalText parses a size.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

// MarshalText writes the size in bytes.
func (s Size) MarshalText() ([]byte, error) { return []byte(strconv.FormatInt(int64(s), 10)), nil }

// ParseSize accepts a byte count with an optional unit: K, M, G, T (powers
// of 1024, also written KiB, MiB, GiB, TiB, KB, MB, GB, TB, k).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("bad size %q (use e.g. 512M, 8GiB): %w", s, ErrInvalid)
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q (use e.g. 512M, 8GiB): %w", s, ErrInvalid)
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
	m, ok := mult[strings.ToUpper(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("bad size unit in %q (use K, M, G or T): %w", s, ErrInvalid)
	}
	v := n * m
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q is too large: %w", s, ErrInvalid)
	}
	return int64(v), nil
}

// Parse reads a spec file (YAML or JSON; JSON is read as YAML). Unknown
// fields are errors that name the line.
func Parse(data []byte) (*Environment, error) {
	var e Environment
	if err := DecodeStrict(data, &e); err != nil {
		return nil, fmt.Errorf("spec: %v: %w", err, ErrInvalid)
	}
	return &e, nil
}

// DecodeStrict decodes one YAML (or JSON) document into v, refusing
// unknown fields and a second document; an empty document leaves v as
// it is. Its error is one line that names each problem's line (the
// decoder's own text spans several).
func DecodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				// "line 1: field lifetme not found in type spec.Environment"
				if at, rest, ok := strings.Cut(m, ": field "); ok {
					if name, _, ok := strings.Cut(rest, " not found in type "); ok {
						m = at + ": unknown field " + name + " (check its spelling; docs/spec.md lists the fields)"
					}
				}
				msgs[i] = m
			}
			return errors.New(strings.Join(msgs, "; "))
		}
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra any
	if dec.Decode(&extra) == nil {
		return errors.New("more than one document in the file")
	}
	return nil
}

// validateView checks the trees and view for what can be known without
// looking at the host.
func (e *Environment) validateView() error {
	names := slices.Sorted(maps.Keys(e.Trees))
	for _, n := range names {
		t := e.Trees[n]
		if !treeName.MatchString(n) {
			return fmt.Errorf("tree name %q: use letters, digits, '-', '_' (max 63): %w", n, ErrInvalid)
		}
		switch t.Kind {
		case KindBtrfs, KindOverlay, KindCopy, KindWorktree:
		case "":
			return fmt.Errorf("tree %s: kind is required (btrfs, overlay, copy or worktree): %w", n, ErrInvalid)
		default:
			return fmt.Errorf("tree %s: kind %q: use btrfs, overlay, copy or worktree: %w", n, t.Kind, ErrInvalid)
		}
		if t.Ref != "" && t.Kind != KindWorktree {
			return fmt.Errorf("tree %s: ref is only for kind worktree: %w", n, ErrInvalid)
		}
		if strings.HasPrefix(t.Ref, "-") || strings.ContainsAny(t.Ref, " \x00") {
			return fmt.Errorf("tree %s: ref %q: give a branch, tag or commit: %w", n, t.Ref, ErrInvalid)
		}
		if t.Kind == KindWorktree && t.Baseline != "" {
			return fmt.Errorf("tree %s: a worktree tree takes source (the repository's absolute path), not a baseline: %w", n, ErrInvalid)
		}
		if (t.Baseline == "") == (t.Source == "") {
			return fmt.Errorf("tree %s: give exactly one of baseline (a registered name) or source (an absolute path): %w", n, ErrInvalid)
		}
		if t.Source != "" && !filepath.IsAbs(t.Source) {
			return fmt.Errorf("tree %s: source %q must be an absolute path: %w", n, t.Source, ErrInvalid)
		}
	}
	used := map[string]bool{}
	seen := map[string]string{}
	check := func(rule, p string) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("view %s: %q must be an absolute path: %w", rule, p, ErrInvalid)
		}
		c := filepath.Clean(p)
		if c == "/" {
			return fmt.Errorf("view %s: the root directory itself can't be a target: %w", rule, ErrInvalid)
		}
		if prev, ok := seen[c]; ok {
			return fmt.Errorf("view: %s is both %s and %s; give each path one rule: %w", c, prev, rule, ErrInvalid)
		}
		seen[c] = rule
		return nil
	}
	for _, t := range slices.Sorted(maps.Keys(e.View.Replace)) {
		name := e.View.Replace[t]
		if err := check("replace", t); err != nil {
			return err
		}
		if _, ok := e.Trees[name]; !ok {
			return fmt.Errorf("view replace %s: no tree named %q (define it under trees): %w", t, name, ErrInvalid)
		}
		if used[name] {
			return fmt.Errorf("view: tree %q replaces two paths; use one tree per path: %w", name, ErrInvalid)
		}
		used[name] = true
	}
	for _, p := range e.View.ReadOnly {
		if err := check("read_only", p); err != nil {
			return err
		}
	}
	for _, p := range e.View.Share {
		if err := check("share", p); err != nil {
			return err
		}
	}
	for _, p := range e.View.Scratch {
		if err := check("scratch", p); err != nil {
			return err
		}
	}
	for _, n := range names {
		if !used[n] {
			return fmt.Errorf("tree %q is not used by any view replace rule: %w", n, ErrInvalid)
		}
	}
	if math.IsNaN(e.Limits.CPUs) || math.IsInf(e.Limits.CPUs, 0) {
		return fmt.Errorf("cpus %v is not a number of cores (give e.g. 0.5 or 2): %w", e.Limits.CPUs, ErrInvalid)
	}
	if e.Limits.CPUs < 0 || e.Limits.Pids < 0 || e.Limits.Memory < 0 {
		return fmt.Errorf("limits must not be negative: %w", ErrInvalid)
	}
	if e.Limits.CPUs > 0 && e.Limits.CPUs < 0.01 {
		return fmt.Errorf("cpus %v is below the kernel's minimum of 0.01 cores: %w", e.Limits.CPUs, ErrInvalid)
	}
	if e.Limits.CPUs > 1<<16 {
		return fmt.Errorf("cpus %v is more cores than any host has: %w", e.Limits.CPUs, ErrInvalid)
	}
	if e.Limits.Memory != 0 && e.Limits.Memory < 4<<20 {
		return fmt.Errorf("memory limit %d bytes is too small to run anything (at least 4M): %w", e.Limits.Memory, ErrInvalid)
	}
	return nil
}
