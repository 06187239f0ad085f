// Package admit owns soft capacity admission (DESIGN.md, "What a user
// gets", point 6; seed 000, "Expected Role"): how many agent workloads this
// host may run at once, from observed load rather than durable
// reservations, and whether a new request is admitted, waits or is refused.
//
// The decision is pure: Compute turns a host sample (logical cores,
// MemAvailable) and the live workloads' sampled tree memory into a
// Capacity, and Decide turns a Capacity, a Mode and the pause flag into a
// Decision; both have table tests. Sampling is separate and only reads
// /proc and cgroup files: SampleHost, and Sampler for the memory of whole
// process trees (a cgroup's counter, or the sum over a PID tree), with the
// completeness and stability the rules depend on.
//
// It holds no state and takes no locks: the caller (the hostfork library,
// the capacity and pause verbs) keeps the live-workload list and the pause
// flag in the registry. Any hostfork package may import it; it imports
// nothing from hostfork.
package admit
