package api

// LimitsEvidence is what the kernel's counters say about a group (an
// environment's limits_now and limit_evidence). Every field is a pointer:
// nil means unknown (the file is missing or unreadable, the resource is
// not accounted, the group is gone), never zero.
type LimitsEvidence struct {
	Memory MemoryEvidence `json:"memory"`
	CPU    CPUEvidence    `json:"cpu"`
	Pids   PidsEvidence   `json:"pids"`
}

// MemoryEvidence comes from memory.events, memory.peak and memory.current
// (cgroup2) or memory.oom_control, memory.failcnt, memory.max_usage_in_bytes
// and memory.usage_in_bytes (cgroup v1).
type MemoryEvidence struct {
	// Source is the mechanism the counters came from: cgroup2 or cgroup1.
	Source string `json:"source,omitempty"`
	// OOMKills counts processes the OOM killer killed in the group (v2
	// memory.events oom_kill, v1 memory.oom_control oom_kill).
	OOMKills *uint64 `json:"oom_kills,omitempty"`
	// OOMs counts times the group ran out of memory (v2 memory.events oom;
	// v1 has no such counter).
	OOMs *uint64 `json:"ooms,omitempty"`
	// LimitHits counts times usage hit the limit (v2 memory.events max, v1
	// memory.failcnt plus memory.memsw.failcnt; see internal/limits for when
	// v1 can't tell).
	LimitHits *uint64 `json:"limit_hits,omitempty"`
	Peak      *uint64 `json:"peak_bytes,omitempty"`
	Current   *uint64 `json:"current_bytes,omitempty"`
}

// OOMKilled reports whether the kernel's counter shows an OOM kill, and
// whether that counter could be read at all.
func (m MemoryEvidence) OOMKilled() (killed, known bool) {
	if m.OOMKills == nil {
		return false, false
	}
	return *m.OOMKills > 0, true
}

// CPUEvidence comes from cpu.stat (cgroup2, or the v1 cpu controller's
// throttling counters) and cpuacct.usage (v1). Times are durations (Go
// duration strings in JSON, the project's convention).
type CPUEvidence struct {
	// UsageSource names the counter Usage came from.
	UsageSource string    `json:"usage_source,omitempty"`
	Usage       *Duration `json:"usage,omitempty"`
	Periods     *uint64   `json:"periods,omitempty"`
	// Throttled counts periods in which the group was throttled.
	Throttled     *uint64   `json:"throttled,omitempty"`
	ThrottledTime *Duration `json:"throttled_time,omitempty"`
}

// PidsEvidence comes from pids.current, pids.peak and pids.events (the same
// files on cgroup2 and v1).
type PidsEvidence struct {
	Current *uint64 `json:"current,omitempty"`
	Peak    *uint64 `json:"peak,omitempty"`
	// MaxEvents counts forks refused because the group was at pids.max.
	MaxEvents *uint64 `json:"max_events,omitempty"`
}
