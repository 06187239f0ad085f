package spec

import "github.com/habemus-papadum/hostfork/api"

// Plan is a request resolved against one host: what Create will do,
// decided before anything is allocated. A plan with Unsupported entries
// can't be created. Create revalidates it: a saved plan is not proof that
// the host or a baseline is unchanged.
type Plan struct {
	Spec Environment `json:"spec"`
	// Tier is the ownership tier the environment gets; TierNote says why,
	// and what is weaker, when it is not the strongest.
	Tier         api.Tier     `json:"tier"`
	TierNote     string       `json:"tier_note,omitempty"`
	CgroupParent string       `json:"cgroup_parent,omitempty"`
	MaxRuntime   api.Duration `json:"max_runtime"`
	Grace        api.Duration `json:"grace"`
	OwnerExit    string       `json:"owner_exit"`
	UntilStopped bool         `json:"until_stopped"`
	// ScopeManager is the systemd manager of the systemd-scope tier.
	ScopeManager string `json:"scope_manager,omitempty"`
	// DeadlineEnforcer names what enforces the deadline independently of
	// the registry and the caller.
	DeadlineEnforcer string `json:"deadline_enforcer,omitempty"`
	// Propagation is how the view receives the host's later mounts and
	// unmounts: "slave" where the host's mounts are shared, else "private".
	Propagation string `json:"propagation,omitempty"`
	// ViewTier is how the view is made: "root" (a mount namespace of
	// hostfork's own) or "user-namespace" (rootless: a user namespace
	// mapping the caller, with a mount namespace inside it); ViewNote says
	// what is weaker then.
	ViewTier string         `json:"view_tier,omitempty"`
	ViewNote string         `json:"view_note,omitempty"`
	Trees    []PlannedTree  `json:"trees,omitempty"`
	Limits   []PlannedLimit `json:"limits,omitempty"`
	View     *ViewPlan      `json:"view,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	// Unsupported lists requests this host can't honour, with the reason.
	Unsupported []string `json:"unsupported,omitempty"`
}

// PlannedTree is one private tree as planned.
type PlannedTree struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Baseline string `json:"baseline,omitempty"`
	Source   string `json:"source"`
	// Target is the path the workload uses.
	Target string `json:"target"`
	// Consistency says what the tree guarantees about its contents.
	Consistency string `json:"consistency"`
	// Ref and Commit: what a worktree tree checks out, and the commit
	// that resolved to when planned.
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// PlannedLimit is one requested budget and how the host enforces it.
type PlannedLimit struct {
	Resource string `json:"resource"`
	Value    string `json:"value"`
	// Mechanism is cgroup2 or cgroup1; empty when the host can't enforce
	// it (then the plan is unsupported, unless weaker limits were
	// explicitly accepted and the limit is recorded as not enforced).
	Mechanism string `json:"mechanism,omitempty"`
	Note      string `json:"note,omitempty"`
}

// View rule kinds.
const (
	RuleReplace  = "replace"
	RuleScratch  = "scratch"
	RuleReadOnly = "read_only"
	RuleShare    = "share"
)

// ViewRule is one planned step of a view, in application order.
type ViewRule struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Requested is the path as written, when it differs from Target
	// (a symlink alias was resolved).
	Requested string `json:"requested,omitempty"`
	Tree      string `json:"tree,omitempty"`
	// Restore: a share that must be put back on top of a covering rule.
	Restore bool `json:"restore,omitempty"`
	// Mkdir: the target is missing on the host but lies inside a private
	// layer created earlier in the view, where it will be created.
	Mkdir bool `json:"mkdir,omitempty"`
	// Hides lists host mounts below Target that the rule covers.
	Hides []string `json:"hides,omitempty"`
	Note  string   `json:"note,omitempty"`
	// Rest: a read_only rule made by read_only_rest, for the one host
	// mount at Target (not the mounts below it).
	Rest bool `json:"rest,omitempty"`
}

// ViewPlan is the planned view.
type ViewPlan struct {
	Rules []ViewRule `json:"rules"`
	// Overlaps lists pairs of rules whose targets nest.
	Overlaps []string `json:"overlaps,omitempty"`
	// InheritedWritable lists host mounts that stay writable in the view.
	InheritedWritable []string `json:"inherited_writable,omitempty"`
	// Private, ReadOnly and Shared sum the view up: the paths whose writes
	// stay in the environment (replace and scratch), the paths made
	// read-only, and the paths whose writes reach the host (shares and
	// inherited writable mounts).
	Private  []string `json:"private,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	Shared   []string `json:"shared,omitempty"`
}
