package limits

import (
	"os"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"path/filepath"
)

// Evidence is what the kernel's counters say about a group. Every field is
// a pointer: nil means unknown (the file is missing or unreadable, the
// resource is not accounted, the group is gone), never zero.
type Evidence struct {
	Memory MemoryEvidence `json:"memory"`
	CPU    CPUEvidence    `json:"cpu"`
	Pids   PidsEvidence   `json:"pids"`
}

// MemoryEvidence comes from memory.events, memory.peak and memory.current
// (cgroup2) or memory.oom_control, memory.failcnt, memory.max_usage_in_bytes
// and memory.usage_in_bytes (cgroup v1).
type MemoryEvidence struct {
	Source Mechanism `json:"source,omitempty"`
	// OOMKills counts processes the OOM killer killed in the group (v2
	// memory.events oom_kill, v1 memory.oom_control oom_kill).
	OOMKills *uint64 `json:"oom_kills,omitempty"`
	// OOMs counts times the group ran out of memory (v2 memory.events oom;
	// v1 has no such counter).
	OOMs *uint64 `json:"ooms,omitempty"`
	// LimitHits counts times usage hit the limit (v2 memory.events max, v1
	// memory.failcnt plus memory.memsw.failcnt; see v1LimitHits for when
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
	UsageSource string        `json:"usage_source,omitempty"`
	Usage       *api.Duration `json:"usage,omitempty"`
	Periods     *uint64       `json:"periods,omitempty"`
	// Throttled counts periods in which the group was throttled.
	Throttled     *uint64       `json:"throttled,omitempty"`
	ThrottledTime *api.Duration `json:"throttled_time,omitempty"`
}

// nanos turns a counter of nanoseconds into a duration.
func nanos(n *uint64) *api.Duration {
	if n == nil {
		return nil
	}
	d := api.Duration(time.Duration(*n))
	return &d
}

// PidsEvidence comes from pids.current, pids.peak and pids.events (the same
// files on cgroup2 and v1).
type PidsEvidence struct {
	Current *uint64 `json:"current,omitempty"`
	Peak    *uint64 `json:"peak,omitempty"`
	// MaxEvents counts forks refused because the group was at pids.max.
	MaxEvents *uint64 `json:"max_events,omitempty"`
}

// Evidence reads the groups' counters.
func (g *Group) Evidence() Evidence {
	var e Evidence
	switch g.Mechanisms[Memory] {
	case Cgroup2:
		e.Memory = MemoryEvidence{Source: Cgroup2}
		ev := readKeyed(filepath.Join(g.V2, "memory.events"))
		e.Memory.OOMKills = key(ev, "oom_kill")
		e.Memory.OOMs = key(ev, "oom")
		e.Memory.LimitHits = key(ev, "max")
		e.Memory.Peak = readUint(filepath.Join(g.V2, "memory.peak"))
		e.Memory.Current = readUint(filepath.Join(g.V2, "memory.current"))
	case Cgroup1:
		d := g.V1["memory"]
		e.Memory = MemoryEvidence{Source: Cgroup1}
		// v1 counts a kill in the victim's own group only: the
		// environment's count includes its commands' groups.
		e.Memory.OOMKills = key(readKeyed(filepath.Join(d, "memory.oom_control")), "oom_kill")
		if e.Memory.OOMKills != nil {
			if ents, err := os.ReadDir(d); err == nil {
				for _, ent := range ents {
					if ent.IsDir() {
						if n := key(readKeyed(filepath.Join(d, ent.Name(), "memory.oom_control")), "oom_kill"); n != nil {
							*e.Memory.OOMKills += *n
						}
					}
				}
			}
		}
		e.Memory.LimitHits = v1LimitHits(d)
		e.Memory.Peak = readUint(filepath.Join(d, "memory.max_usage_in_bytes"))
		e.Memory.Current = readUint(filepath.Join(d, "memory.usage_in_bytes"))
	}

	switch g.Mechanisms[CPU] {
	case Cgroup2:
		st := readKeyed(filepath.Join(g.V2, "cpu.stat"))
		e.CPU.UsageSource = "cgroup2 cpu.stat"
		e.CPU.Usage = nanos(scaled(key(st, "usage_usec"), 1000))
		e.CPU.Periods = key(st, "nr_periods")
		e.CPU.Throttled = key(st, "nr_throttled")
		e.CPU.ThrottledTime = nanos(scaled(key(st, "throttled_usec"), 1000))
	case Cgroup1:
		st := readKeyed(filepath.Join(g.V1["cpu"], "cpu.stat"))
		e.CPU.Periods = key(st, "nr_periods")
		e.CPU.Throttled = key(st, "nr_throttled")
		e.CPU.ThrottledTime = nanos(key(st, "throttled_time"))
		if d, ok := g.V1["cpuacct"]; ok {
			e.CPU.UsageSource = "cgroup1 cpuacct.usage"
			e.CPU.Usage = nanos(readUint(filepath.Join(d, "cpuacct.usage")))
		}
	}
	if e.CPU.Usage == nil && g.V2 != "" {
		// cgroup2's core cpu.stat has usage_usec in every non-root group,
		// with or without the cpu controller. Its throttling fields are
		// not read here: without the controller they are meaningless.
		if u := key(readKeyed(filepath.Join(g.V2, "cpu.stat")), "usage_usec"); u != nil {
			e.CPU.UsageSource = "cgroup2 cpu.stat (core)"
			e.CPU.Usage = nanos(scaled(u, 1000))
		}
	}
	if e.CPU.Usage == nil {
		e.CPU.UsageSource = ""
	}

	var pd string
	switch g.Mechanisms[Pids] {
	case Cgroup2:
		pd = g.V2
	case Cgroup1:
		pd = g.V1["pids"]
	}
	if pd != "" {
		e.Pids.Current = readUint(filepath.Join(pd, "pids.current"))
		e.Pids.Peak = readUint(filepath.Join(pd, "pids.peak"))
		e.Pids.MaxEvents = key(readKeyed(filepath.Join(pd, "pids.events")), "max")
	}
	return e
}

// v1LimitHits sums memory.failcnt and memory.memsw.failcnt. With a
// memory+swap limit set (Create sets it equal to the memory limit), the
// memsw counter is charged first and fails first, and on some kernels
// (6.18 here) neither failcnt moves although the limit was hit and the OOM
// killer ran: a zero is then not evidence and is reported as unknown.
func v1LimitHits(dir string) *uint64 {
	hits := readUint(filepath.Join(dir, "memory.failcnt"))
	if hits == nil {
		return nil
	}
	if sw := readUint(filepath.Join(dir, "memory.memsw.failcnt")); sw != nil {
		*hits += *sw
	}
	if *hits == 0 {
		if l := readUint(filepath.Join(dir, "memory.memsw.limit_in_bytes")); l != nil && *l < 1<<62 {
			return nil
		}
	}
	return hits
}
