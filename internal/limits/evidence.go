package limits

import (
	"os"
	"time"

	"path/filepath"

	"github.com/habemus-papadum/hostfork/api"
)

// The evidence types are the public ones (api), so records and the API
// carry them typed.
type (
	Evidence       = api.LimitsEvidence
	MemoryEvidence = api.MemoryEvidence
	CPUEvidence    = api.CPUEvidence
	PidsEvidence   = api.PidsEvidence
)

// nanos turns a counter of nanoseconds into a duration.
func nanos(n *uint64) *api.Duration {
	if n == nil {
		return nil
	}
	d := api.Duration(time.Duration(*n))
	return &d
}

// Evidence reads the groups' counters.
func (g *Group) Evidence() Evidence {
	var e Evidence
	switch g.Mechanisms[Memory] {
	case Cgroup2:
		e.Memory = MemoryEvidence{Source: string(Cgroup2)}
		ev := readKeyed(filepath.Join(g.V2, "memory.events"))
		e.Memory.OOMKills = key(ev, "oom_kill")
		e.Memory.OOMs = key(ev, "oom")
		e.Memory.LimitHits = key(ev, "max")
		e.Memory.Peak = readUint(filepath.Join(g.V2, "memory.peak"))
		e.Memory.Current = readUint(filepath.Join(g.V2, "memory.current"))
	case Cgroup1:
		d := g.V1["memory"]
		e.Memory = MemoryEvidence{Source: string(Cgroup1)}
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
