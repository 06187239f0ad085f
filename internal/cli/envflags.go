package cli

import (
	"cmp"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/spec"
)

// envFlags are the options that describe an environment; they compile,
// together with an optional spec file, to one spec.Environment.
type envFlags struct {
	specFile     string
	ttl          string
	untilStopped bool
	grace        string
	idle         string
	ownerExit    string
	purpose      string
	labels       []string
	tier         string
	trees        []string
	replace      []string
	ro           []string
	share        []string
	scratch      []string
	untrusted    bool
	profile      string
	memory       string
	cpus         string
	pids         int64
	allowWeaker  bool
	retainTrees  string
	retainEvid   string
	launchEnvFlags
}

func (f *envFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.specFile, "spec", "", "environment spec file (YAML or JSON); flags add to or override it")
	fl.StringVar(&f.ttl, "ttl", "", "maximum runtime from activation to force-stop, grace included (e.g. 20m)")
	fl.BoolVar(&f.untilStopped, "until-stopped", false, "no deadline: keep running, also after this process exits, until 'hostfork stop'")
	fl.StringVar(&f.grace, "grace", "", "termination grace inside every stop (default 2s)")
	fl.StringVar(&f.idle, "idle-timeout", "", "stop a command tree after this long without output or signals (counted from its start)")
	fl.StringVar(&f.ownerExit, "owner-exit", "", "when this process exits: stop (default) or detach")
	fl.StringVar(&f.purpose, "purpose", "", "why this runs (shown by ps and status)")
	fl.StringArrayVar(&f.labels, "label", nil, "label K=V (repeatable)")
	fl.StringVar(&f.tier, "tier", "", "ownership tier: cgroup2 or subreaper (default: the strongest available)")
	fl.StringArrayVar(&f.trees, "tree", nil, "private tree NAME=KIND:SOURCE (KIND btrfs|overlay|copy; SOURCE a baseline name or an absolute path), or NAME=worktree:REPO[@REF] (a git worktree on branch hostfork/ENV/NAME)")
	fl.StringArrayVar(&f.replace, "replace", nil, "replace host directory TARGET=TREE in the view")
	fl.StringArrayVar(&f.ro, "ro", nil, "make PATH read-only in the view")
	fl.StringArrayVar(&f.share, "share", nil, "keep PATH the live host directory, restored over other rules (e.g. a socket dir)")
	fl.StringArrayVar(&f.scratch, "scratch", nil, "give PATH a private empty tmpfs (e.g. /tmp)")
	fl.StringVar(&f.profile, "profile", "", "a named set of view rules: agent (private /tmp, $HOME as an overlay of the real home, everything else read-only) or one the spec defines under profiles")
	fl.BoolVar(&f.untrusted, "allow-untrusted-targets", false, "accept view targets under a directory another user can write (they choose which of their directories is covered; links are never followed)")
	fl.StringVar(&f.memory, "memory", "", "memory budget for the whole environment (e.g. 8G)")
	fl.StringVar(&f.cpus, "cpus", "", "CPU budget in cores, fractional allowed (e.g. 1.5)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes in the environment")
	fl.BoolVar(&f.allowWeaker, "allow-weaker", false, "accept limits the host can enforce only in a weaker form")
	fl.StringVar(&f.retainTrees, "retain-trees", "", "keep this environment's private trees this long after its stop (0s: at the next gc)")
	fl.StringVar(&f.retainEvid, "retain-evidence", "", "keep this environment's records and logs this long after its stop")
	f.launchEnvFlags.add(c, c.Name() != "plan")
}

// spec builds the request. detach says the caller returns at once (so the
// owner-exit policy defaults to detach and an expiry is required).
func (f *envFlags) spec(detach bool) (spec.Environment, error) {
	var s spec.Environment
	if f.specFile != "" {
		b, err := os.ReadFile(f.specFile)
		if err != nil {
			return s, usageErr("--spec: %v", err)
		}
		p, err := spec.Parse(b)
		if err != nil {
			return s, withCode(ExitUsage, err)
		}
		s = *p
	}
	s.Purpose = cmp.Or(f.purpose, s.Purpose)
	s.Tier = cmp.Or(f.tier, s.Tier)
	ls, err := labelsOf(f.labels)
	if err != nil {
		return s, err
	}
	if ls != nil && s.Labels == nil {
		s.Labels = map[string]string{}
	}
	maps.Copy(s.Labels, ls)
	for _, t := range f.trees {
		name, rest, ok := strings.Cut(t, "=")
		kind, src, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || name == "" || src == "" {
			return s, usageErr("--tree %q: write it as NAME=KIND:SOURCE, e.g. project=overlay:/srv/base/project", t)
		}
		if s.Trees == nil {
			s.Trees = map[string]spec.Tree{}
		}
		tr := spec.Tree{Kind: kind}
		if kind == spec.KindWorktree {
			// worktree:REPO[@REF]
			if i := strings.LastIndexByte(src, '@'); i > 0 && !strings.Contains(src[i:], "/") {
				src, tr.Ref = src[:i], src[i+1:]
			}
		}
		if strings.HasPrefix(src, "/") {
			tr.Source = src
		} else {
			tr.Baseline = src
		}
		s.Trees[name] = tr
	}
	for _, r := range f.replace {
		target, tree, ok := strings.Cut(r, "=")
		if !ok || target == "" || tree == "" {
			return s, usageErr("--replace %q: write it as TARGET=TREE, e.g. /work/project=project", r)
		}
		if s.View.Replace == nil {
			s.View.Replace = map[string]string{}
		}
		s.View.Replace[target] = tree
	}
	s.View.ReadOnly = append(s.View.ReadOnly, f.ro...)
	s.View.Share = append(s.View.Share, f.share...)
	s.View.Scratch = append(s.View.Scratch, f.scratch...)
	s.View.AllowUntrustedTargets = s.View.AllowUntrustedTargets || f.untrusted
	s.Profile = cmp.Or(f.profile, s.Profile)
	if f.memory != "" {
		v, err := spec.ParseSize(f.memory)
		if err != nil {
			return s, usageErr("--memory: %v", err)
		}
		s.Limits.Memory = spec.Size(v)
	}
	if f.cpus != "" {
		v, err := strconv.ParseFloat(f.cpus, 64)
		if err != nil || v <= 0 {
			return s, usageErr("--cpus %q: give a positive number of cores, e.g. 0.5 or 2", f.cpus)
		}
		s.Limits.CPUs = v
	}
	s.Limits.Pids = cmp.Or(f.pids, s.Limits.Pids)
	s.Limits.AllowWeaker = s.Limits.AllowWeaker || f.allowWeaker
	for _, r := range []struct {
		flag, val string
		dst       **spec.Duration
	}{{"--retain-trees", f.retainTrees, &s.Retention.Trees}, {"--retain-evidence", f.retainEvid, &s.Retention.Evidence}} {
		if r.val == "" {
			continue
		}
		d, err := spec.ParseDuration(r.val)
		if err != nil {
			return s, usageErr("%s: %v", r.flag, err)
		}
		sd := spec.Duration(d)
		*r.dst = &sd
	}
	if err := f.launchEnvFlags.apply(&s.Launch); err != nil {
		return s, err
	}
	if f.ttl != "" && f.untilStopped {
		return s, usageErr("--ttl and --until-stopped exclude each other: give an expiry or none, not both")
	}
	if f.ttl != "" {
		d, err := spec.ParseDuration(f.ttl)
		if err != nil {
			return s, usageErr("--ttl: %v", err)
		}
		if d == 0 {
			return s, usageErr("--ttl must be positive (or use --until-stopped)")
		}
		s.Lifetime.MaxRuntime = spec.Duration(d)
		s.Lifetime.UntilStopped = false
	}
	if f.grace != "" {
		d, err := spec.ParseDuration(f.grace)
		if err != nil {
			return s, usageErr("--grace: %v", err)
		}
		d = cmp.Or(d, time.Nanosecond)
		s.Lifetime.Grace = spec.Duration(d)
	}
	if f.idle != "" {
		d, err := spec.ParseDuration(f.idle)
		if err != nil || d == 0 {
			return s, usageErr("--idle-timeout %q: give a positive duration such as 10m", f.idle)
		}
		s.Lifetime.IdleTimeout = spec.Duration(d)
	}
	if f.untilStopped {
		s.Lifetime.UntilStopped = true
		s.Lifetime.MaxRuntime = 0
	}
	s.Lifetime.OwnerExit = cmp.Or(f.ownerExit, s.Lifetime.OwnerExit)
	if s.Lifetime.OwnerExit == "" && (detach || s.Lifetime.UntilStopped) {
		s.Lifetime.OwnerExit = spec.OwnerExitDetach
	}
	if detach && s.Lifetime.OwnerExit == spec.OwnerExitStop {
		return s, usageErr("--owner-exit stop would stop the environment as soon as hostfork returns; drop --owner-exit or stay in the foreground")
	}
	if err := s.Validate(); err != nil {
		return s, withCode(ExitUsage, err)
	}
	return s, nil
}
