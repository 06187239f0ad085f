// Package planner plans an environment against this host: it gathers the
// facts a plan needs (the host's mounts, registered baselines and what
// their sources are, resource controllers, the systemd manager, the
// ownership tiers the engine probed) and asks the pure internal/plan. It
// also registers and lists baselines.
//
// Only the engine imports it (Engine.Plan, Create).
package planner
