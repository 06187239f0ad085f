package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"golang.org/x/sys/unix"
)

// CPUPeriod is the CFS bandwidth period used for CPU budgets, in µs.
const CPUPeriod = 100000

// minQuota is the kernel's smallest CFS quota (1 ms), in µs.
const minQuota = 1000

// Budget is an environment's aggregate resource budget. A zero field means
// no limit for that resource (it is still accounted where the host can).
type Budget struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"` // fractional cores
	Pids        int64   `json:"pids,omitempty"`
}

// wants reports whether b limits r.
func (b Budget) wants(r Resource) bool {
	switch r {
	case Memory:
		return b.MemoryBytes != 0
	case CPU:
		return b.CPUs != 0
	case Pids:
		return b.Pids != 0
	}
	return false
}

// Validate checks the budget's values.
func (b Budget) Validate() error {
	if b.MemoryBytes < 0 {
		return fmt.Errorf("%w: memory %d is negative", ErrInvalid, b.MemoryBytes)
	}
	if b.MemoryBytes > 0 && b.MemoryBytes < 1<<20 {
		return fmt.Errorf("%w: memory %d bytes is below 1 MiB", ErrInvalid, b.MemoryBytes)
	}
	if math.IsNaN(b.CPUs) || math.IsInf(b.CPUs, 0) || b.CPUs < 0 {
		return fmt.Errorf("%w: cpus %v", ErrInvalid, b.CPUs)
	}
	if b.CPUs > 0 && b.quota() < minQuota {
		return fmt.Errorf("%w: cpus %v is below the kernel's minimum of 0.01", ErrInvalid, b.CPUs)
	}
	if b.Pids < 0 {
		return fmt.Errorf("%w: pids %d is negative", ErrInvalid, b.Pids)
	}
	return nil
}

// quota is the CFS quota in µs per CPUPeriod for b.CPUs.
func (b Budget) quota() int64 { return int64(math.Round(b.CPUs * CPUPeriod)) }

// Group is one environment's set of limit groups. Its fields are plain data
// so the registry can record them and a later process (the reaper, `usage`)
// can rebuild the Group to read evidence or remove the groups.
type Group struct {
	Name string `json:"name"`
	// Mechanisms says how each resource is handled for this group.
	Mechanisms map[Resource]Mechanism `json:"mechanisms"`
	// V2 is the environment's cgroup2 group (the caller's), if given.
	V2 string `json:"v2,omitempty"`
	// V1 maps a v1 controller name (memory, cpu, cpuacct, pids) to the
	// group directory Create made for it; co-mounted controllers share one.
	V1 map[string]string `json:"v1,omitempty"`
}

// Create makes the environment's limit groups for name and writes b into
// them:
//
//   - for resources on cgroup2, the limits go into v2Group, the
//     environment's cgroup2 group, which the caller has just created
//     exclusively (limits never creates or removes it): memory.max,
//     memory.swap.max 0 (so the limit is real), cpu.max, pids.max;
//   - for resources on cgroup v1, Create makes <hierarchy>/<V1Parent>/<name>
//     exclusively in each hierarchy (an existing group is ErrExists, never
//     adopted) — also for an unbudgeted resource, so it is accounted — and
//     writes memory.limit_in_bytes (and memory.memsw.limit_in_bytes),
//     cpu.cfs_period_us and cpu.cfs_quota_us, pids.max. When cpuacct is
//     mounted, a group is made there too for CPU usage.
//
// v2Group may be "" when no resource uses cgroup2; when given, it also
// serves as the CPU usage source of last resort (its cpu.stat usage_usec
// exists without any controller). A budgeted resource the host can't limit
// is ErrUnavailable, before anything is made. On error nothing Create made
// is left behind.
func (h *Host) Create(name, v2Group string, b Budget) (*Group, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("%w: group name %q must be one path element", ErrInvalid, name)
	}
	g := &Group{Name: name, V2: v2Group, Mechanisms: map[Resource]Mechanism{}, V1: map[string]string{}}
	for _, s := range h.Support {
		if b.wants(s.Resource) && !s.Available() {
			return nil, fmt.Errorf("limiting %s: %w: %s", s.Resource, ErrUnavailable, s.Reason)
		}
		if s.Mechanism == Cgroup2 && b.wants(s.Resource) && v2Group == "" {
			return nil, fmt.Errorf("%w: %s is limited through cgroup2 and needs the environment's cgroup2 group", ErrInvalid, s.Resource)
		}
		switch s.Mechanism {
		case Cgroup2:
			if v2Group != "" {
				g.Mechanisms[s.Resource] = Cgroup2
			}
		case Cgroup1:
			g.Mechanisms[s.Resource] = Cgroup1
			g.V1[string(s.Resource)] = filepath.Join(s.Dir, name)
		}
	}
	if g.Mechanisms[CPU] == Cgroup1 && h.cpuacctDir != "" {
		g.V1["cpuacct"] = filepath.Join(h.cpuacctDir, name)
	}
	for _, ctrl := range h.needEnable {
		if b.wants(Resource(ctrl)) {
			if err := enableV2(h.V2Parent, ctrl); err != nil {
				return nil, err
			}
		}
	}
	var made []string
	fail := func(err error) (*Group, error) {
		for i := len(made) - 1; i >= 0; i-- {
			_ = rmdir(made[i])
		}
		return nil, err
	}
	for _, dir := range g.v1Dirs() {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fail(fmt.Errorf("creating cgroup v1 parent %s: %w", filepath.Dir(dir), err))
		}
		if err := mkdir(dir); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fail(fmt.Errorf("creating cgroup %s: %w", dir, ErrExists))
			}
			return fail(fmt.Errorf("creating cgroup %s: %w", dir, err))
		}
		made = append(made, dir)
	}
	if err := g.write(b); err != nil {
		return fail(err)
	}
	return g, nil
}

// v1Dirs lists the distinct v1 group directories in a fixed order.
func (g *Group) v1Dirs() []string {
	var dirs []string
	for _, d := range g.V1 {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// write puts the budget's limits into the groups.
func (g *Group) write(b Budget) error {
	type w struct{ dir, file, val string }
	var ws []w
	if b.MemoryBytes > 0 {
		v := strconv.FormatInt(b.MemoryBytes, 10)
		switch g.Mechanisms[Memory] {
		case Cgroup2:
			ws = append(ws, w{g.V2, "memory.max", v})
			// Without swap.max 0 the group could page out past its limit.
			if exists(filepath.Join(g.V2, "memory.swap.max")) {
				ws = append(ws, w{g.V2, "memory.swap.max", "0"})
			}
		case Cgroup1:
			d := g.V1["memory"]
			// memsw (memory+swap) must not be below the memory limit, so
			// it is written second.
			ws = append(ws, w{d, "memory.limit_in_bytes", v})
			if exists(filepath.Join(d, "memory.memsw.limit_in_bytes")) {
				ws = append(ws, w{d, "memory.memsw.limit_in_bytes", v})
			}
		}
	}
	if b.CPUs > 0 {
		q := strconv.FormatInt(b.quota(), 10)
		switch g.Mechanisms[CPU] {
		case Cgroup2:
			ws = append(ws, w{g.V2, "cpu.max", q + " " + strconv.Itoa(CPUPeriod)})
		case Cgroup1:
			d := g.V1["cpu"]
			ws = append(ws, w{d, "cpu.cfs_period_us", strconv.Itoa(CPUPeriod)}, w{d, "cpu.cfs_quota_us", q})
		}
	}
	if b.Pids > 0 {
		v := strconv.FormatInt(b.Pids, 10)
		switch g.Mechanisms[Pids] {
		case Cgroup2:
			ws = append(ws, w{g.V2, "pids.max", v})
		case Cgroup1:
			ws = append(ws, w{g.V1["pids"], "pids.max", v})
		}
	}
	for _, x := range ws {
		p := filepath.Join(x.dir, x.file)
		if err := cgroup.WriteFile(p, x.val); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("writing limit %s: %w: the controller is not enabled for this group", p, ErrUnavailable)
			}
			return fmt.Errorf("writing limit %s=%s: %w", p, x.val, err)
		}
	}
	return nil
}

// Join moves a supervisor (a gated guardian, a keeper; 0: the calling
// process) into every v1 group but memory. cgroup v1 has no clone-into, so
// the launcher makes the gated guardian join before its workload starts;
// children inherit the groups, and a workload joins its own memory group
// (CommandGroups, under the environment's). The supervisors stay out of
// the memory budget they witness, so its OOM kill never takes them. With
// no v1 groups it does nothing (cgroup2 placement is clone-into, by the
// caller).
func (g *Group) Join(pid int) error {
	for _, d := range g.v1Dirs() {
		if d == g.V1["memory"] {
			continue
		}
		p := filepath.Join(d, "cgroup.procs")
		if err := cgroup.WriteFile(p, strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("joining pid %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// removeRetry bounds how long Remove waits for exiting tasks to leave.
const removeRetry = 2 * time.Second

// Remove removes the v1 groups Create made. Groups already gone are fine;
// EBUSY (tasks still leaving after a kill) is retried briefly, until ctx
// ends or about 2 s pass. The cgroup2 group is the caller's and is left
// alone. Read Evidence first: it is gone with the groups.
func (g *Group) Remove(ctx context.Context) error {
	deadline := time.Now().Add(removeRetry)
	var errs []error
	for _, d := range g.v1Dirs() {
		// Commands' own groups (CommandGroups) that are left go first.
		if ents, err := os.ReadDir(d); err == nil {
			for _, e := range ents {
				if e.IsDir() {
					if err := removeDir(ctx, filepath.Join(d, e.Name()), deadline); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		if err := removeDir(ctx, d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CommandGroups makes a command's own cgroup v1 memory group, a child of
// the environment's, so that the kernel's OOM-kill counter names the
// command (v1 counts a kill in the victim's own group only). It returns
// the directories the command's workload joins before it runs; none when
// memory is not limited on v1 (on cgroup2 the command's own cgroup2 group
// carries its counters).
func (g *Group) CommandGroups(cid string) ([]string, error) {
	d, ok := g.commandDir(cid)
	if !ok {
		return nil, nil
	}
	if err := mkdir(d); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("creating cgroup %s: %w", d, ErrExists)
		}
		return nil, fmt.Errorf("creating cgroup %s: %w", d, err)
	}
	return []string{d}, nil
}

// CommandGroupDirs are the directories CommandGroups makes for cid (for
// the ledger, before they are made).
func (g *Group) CommandGroupDirs(cid string) []string {
	if d, ok := g.commandDir(cid); ok {
		return []string{d}
	}
	return nil
}

func (g *Group) commandDir(cid string) (string, bool) {
	if g.Mechanisms[Memory] != Cgroup1 || cid == "" || strings.ContainsRune(cid, '/') {
		return "", false
	}
	return filepath.Join(g.V1["memory"], cid), true
}

// CommandOOMFile is the file holding a command's own oom_kill counter
// (see CommandOOMKills); "" when it has none.
func (g *Group) CommandOOMFile(cid, v2Group string) string {
	switch g.Mechanisms[Memory] {
	case Cgroup1:
		if d, ok := g.commandDir(cid); ok {
			return filepath.Join(d, "memory.oom_control")
		}
	case Cgroup2:
		if v2Group != "" {
			return filepath.Join(v2Group, "memory.events")
		}
	}
	return ""
}

// CommandOOMKills reads a command's own OOM-kill counter: its v1 memory
// group, or memory.events of its cgroup2 group (v2Group) when memory is on
// cgroup2. nil: unknown (not accounted, or the counter is unreadable).
func (g *Group) CommandOOMKills(cid, v2Group string) *uint64 {
	switch g.Mechanisms[Memory] {
	case Cgroup1:
		if d, ok := g.commandDir(cid); ok {
			return key(readKeyed(filepath.Join(d, "memory.oom_control")), "oom_kill")
		}
	case Cgroup2:
		if v2Group != "" {
			return key(readKeyed(filepath.Join(v2Group, "memory.events")), "oom_kill")
		}
	}
	return nil
}

// RemoveCommand removes a command's own groups (CommandGroups). A group
// already gone is fine.
func (g *Group) RemoveCommand(ctx context.Context, cid string) error {
	d, ok := g.commandDir(cid)
	if !ok {
		return nil
	}
	return removeDir(ctx, d, time.Now().Add(removeRetry))
}

func removeDir(ctx context.Context, d string, deadline time.Time) error {
	for {
		err := rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.EBUSY) && ctx.Err() == nil && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("removing cgroup %s: %w", d, err)
	}
}
