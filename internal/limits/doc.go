// Package limits owns the aggregate resource budget of one environment —
// memory, CPU and PIDs — on whichever cgroup controllers the host offers,
// and reads back the kernel's evidence of what the budget did (OOM kills,
// peaks, pids limit hits, CPU usage and throttling).
//
// Detect finds, per resource, a cgroup v2 controller in a given cgroup2
// parent or else a writable cgroup v1 hierarchy (the hybrid layout, where the
// resource controllers stay on v1 beside a controller-less cgroup2 mount),
// and says which, or why neither (DESIGN.md, "Linux execution": Limits).
// Host.Create makes the environment's v1 groups exclusively and writes the
// limits into them and into the caller's cgroup2 group; Group.Join places a
// process in the v1 groups (v1 has no clone-into); Group.Evidence reads the
// counters, reporting what it can't read as unknown (nil), never as zero.
//
// It does not own the environment's cgroup2 group (package cgroup and the
// library create, kill and remove that) and holds no policy about when a
// budget is requested. Only Linux mechanism code (the hostfork library,
// supervise, doctor, plan's capability probe) imports it; it imports nothing
// from hostfork except the cgroup package's sentinel.
package limits
