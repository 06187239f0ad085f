// Package admit owns soft capacity admission (DESIGN.md, "What a user
// gets", point 6; seed 000, "Expected Role"): how many agent workloads this
// host may run at once, from observed load rather than durable
// reservations, and whether a new request is admitted, waits or is refused.
//
// It is pure: Compute turns host facts (logical cores, MemAvailable) and
// the live workloads' sampled tree memory into a Capacity, and Decide turns
// a Capacity, a Mode and the pause flag into a Decision; both have table
// tests. It reads nothing itself. The caller gathers the facts first:
// internal/tree's Sampler samples the memory of whole process trees (a
// cgroup's counter, or the sum over a PID tree) with the completeness and
// stability the rules depend on, and internal/linux gives the host's
// AllowedCPUs and MemAvailable.
//
// It holds no state and takes no locks: the caller (the hostfork library,
// the capacity and pause verbs) keeps the live-workload list and the pause
// flag in the registry. Any hostfork package may import it; it imports
// only api and the standard library, and nothing that touches the OS.
package admit
