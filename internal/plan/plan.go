// Package plan is hostfork's pure view planner: from a validated request
// and facts about the host (its mount table, the paths hostfork itself
// needs, resolved symlinks), it decides the ordered mount rules of an
// environment's view and reports nested mounts, overlaps, aliases,
// inherited writable areas and self-shadowing — before anything is
// allocated. It performs no I/O; the hostfork library gathers the facts and
// applies the result. Any package may import it.
package plan

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/habemus-papadum/hostfork/spec"
)

// ErrShadowing reports a view that would hide a path hostfork needs.
var ErrShadowing = fmt.Errorf("view hides a path hostfork needs: %w", spec.ErrInvalid)

// Rule kinds.
const (
	Replace  = spec.RuleReplace
	Scratch  = spec.RuleScratch
	ReadOnly = spec.RuleReadOnly
	Share    = spec.RuleShare
)

// Mount is one entry of the host's mount table.
type Mount struct {
	Target  string
	FSType  string
	Options string // per-mount options, e.g. "rw,nosuid"
}

// Facts are what the planner needs to know about the host.
type Facts struct {
	Mounts []Mount
	// Resolve maps a requested path to its symlink-free form, or refuses
	// it (a path another user could redirect); nil maps every path to
	// itself, existing.
	Resolve func(p string) (Resolved, error)
	// Protected are paths that must stay reachable in the view: the store
	// root and the hostfork executable.
	Protected []string
}

// Resolved is a target as the host resolves it.
type Resolved struct {
	Path   string // symlink-free
	Exists bool   // false: missing from some component on
	Note   string // what the plan should say about it, if anything
}

// Rule is one planned step, in application order.
type Rule = spec.ViewRule

// Result is the planned view.
type Result = spec.ViewPlan

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

func under(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// View plans the view of e (which must already be validated).
func View(e *spec.Environment, f Facts) (*Result, error) {
	type req struct {
		kind, path, tree string
	}
	var reqs []req
	for t, tree := range e.View.Replace {
		reqs = append(reqs, req{Replace, t, tree})
	}
	for _, p := range e.View.Scratch {
		reqs = append(reqs, req{Scratch, p, ""})
	}
	for _, p := range e.View.ReadOnly {
		reqs = append(reqs, req{ReadOnly, p, ""})
	}
	for _, p := range e.View.Share {
		reqs = append(reqs, req{Share, p, ""})
	}
	out := &Result{}
	seen := map[string]string{}
	onHost := map[string]bool{}
	var cover, shares []Rule
	for _, r := range reqs {
		clean := filepath.Clean(r.path)
		res := Resolved{Path: clean, Exists: true}
		if f.Resolve != nil {
			var err error
			if res, err = f.Resolve(clean); err != nil {
				return nil, err
			}
		}
		target, exists := res.Path, res.Exists
		rule := Rule{Kind: r.kind, Target: target, Tree: r.tree, Note: res.Note}
		if target != clean {
			rule.Requested = clean
			rule.Note = strings.TrimPrefix(rule.Note+"; ", "; ") + "alias: " + clean + " resolves to " + target
		}
		if prev, ok := seen[target]; ok {
			return nil, fmt.Errorf("view: %s (%s) and %s name the same directory %s; give it one rule: %w", prev, r.kind, r.path, target, spec.ErrInvalid)
		}
		seen[target] = r.kind + " " + clean
		if !exists {
			rule.Mkdir = true // validated below: only allowed inside a private layer
		} else {
			onHost[target] = true
		}
		if r.kind == Share {
			shares = append(shares, rule)
		} else {
			cover = append(cover, rule)
		}
	}
	// Shallow targets first, so deeper rules apply on top of them.
	sort.SliceStable(cover, func(i, j int) bool {
		if di, dj := depth(cover[i].Target), depth(cover[j].Target); di != dj {
			return di < dj
		}
		return cover[i].Target < cover[j].Target
	})
	for i := range cover {
		r := &cover[i]
		// A target inside an earlier private layer is made there when the
		// layer lacks it (a home under a scratch /tmp).
		for _, o := range cover[:i] {
			if (o.Kind == Replace || o.Kind == Scratch) && under(r.Target, o.Target) && r.Target != o.Target {
				r.Mkdir = true
			}
		}
		if r.Mkdir && !onHost[r.Target] {
			if !slices.ContainsFunc(cover[:i], func(o Rule) bool {
				return (o.Kind == Replace || o.Kind == Scratch) && under(r.Target, o.Target) && r.Target != o.Target
			}) {
				return nil, fmt.Errorf("view %s: %s does not exist on the host; create the directory first (hostfork never creates host paths): %w", r.Kind, r.Target, spec.ErrInvalid)
			}
		}
		for _, m := range f.Mounts {
			if m.Target != r.Target && under(m.Target, r.Target) && r.Kind != ReadOnly {
				r.Hides = append(r.Hides, m.Target)
			}
		}
		for _, o := range cover[:i] {
			if under(r.Target, o.Target) {
				out.Overlaps = append(out.Overlaps, fmt.Sprintf("%s %s applies on top of %s %s", r.Kind, r.Target, o.Kind, o.Target))
			}
		}
	}
	// A share that lies under a covering rule is restored on top of it.
	for i := range shares {
		s := &shares[i]
		for _, c := range cover {
			if under(s.Target, c.Target) {
				s.Restore = true
				s.Note = strings.TrimPrefix(s.Note+"; ", "; ") + "restored over " + c.Kind + " " + c.Target
			}
		}
		if s.Mkdir {
			return nil, fmt.Errorf("view share: %s does not exist on the host; only live host paths can be shared: %w", s.Target, spec.ErrInvalid)
		}
		if !s.Restore {
			s.Note = strings.TrimPrefix(s.Note+"; ", "; ") + "already the live host path (nothing covers it)"
		}
	}
	sort.SliceStable(shares, func(i, j int) bool { return depth(shares[i].Target) < depth(shares[j].Target) })
	out.Rules = append(cover, shares...)
	// Self-shadowing: a protected path under a covering rule must be
	// restored by a share at or below that rule.
	for _, p := range f.Protected {
		for _, c := range cover {
			if !under(p, c.Target) {
				continue
			}
			if !slices.ContainsFunc(shares, func(s Rule) bool { return under(p, s.Target) && under(s.Target, c.Target) }) {
				return nil, fmt.Errorf("view %s %s would hide %s, which hostfork needs; add it under view.share (--share %s) to restore it, or choose another target: %w", c.Kind, c.Target, p, p, ErrShadowing)
			}
		}
	}
	// Inherited writable areas: rw host mounts of real filesystems that no
	// rule covers (or that a share restores). With read_only_rest each
	// becomes a read-only rule instead, unless a share keeps it.
	var rest []Rule
	for _, m := range f.Mounts {
		if pseudoFS[m.FSType] || !hasOpt(m.Options, "rw") {
			continue
		}
		entry := m.Target + " (" + m.FSType + ")"
		if slices.ContainsFunc(cover, func(c Rule) bool { return under(m.Target, c.Target) }) || slices.Contains(out.InheritedWritable, entry) {
			continue
		}
		if e.View.ReadOnlyRest && !slices.ContainsFunc(rest, func(r Rule) bool { return r.Target == m.Target }) && !slices.ContainsFunc(shares, func(s Rule) bool { return under(m.Target, s.Target) }) {
			rest = append(rest, Rule{Kind: ReadOnly, Target: m.Target, Rest: true, Note: "read_only_rest: the host's " + m.FSType + " mount here, not the mounts below it"})
			continue
		}
		out.InheritedWritable = append(out.InheritedWritable, entry)
	}
	// The rest goes last, once every private tree is mounted: an overlay
	// needs its upper's mount writable when it is mounted. Each rest rule
	// changes one mount, so the mounts made on top keep their modes.
	out.Rules = append(out.Rules, rest...)
	for _, r := range out.Rules {
		switch r.Kind {
		case Replace, Scratch:
			out.Private = append(out.Private, r.Target)
		case ReadOnly:
			out.ReadOnly = append(out.ReadOnly, r.Target)
		case Share:
			out.Shared = append(out.Shared, r.Target)
		}
	}
	out.Shared = append(out.Shared, out.InheritedWritable...)
	return out, nil
}

var pseudoFS = map[string]bool{"proc": true, "sysfs": true, "cgroup": true, "cgroup2": true, "devpts": true, "mqueue": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "pstore": true, "bpf": true, "configfs": true, "fusectl": true,
	"hugetlbfs": true, "autofs": true, "binfmt_misc": true, "nsfs": true, "efivarfs": true, "rpc_pipefs": true, "devtmpfs": true}

func hasOpt(opts, o string) bool { return slices.Contains(strings.Split(opts, ","), o) }
