package hostfork

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
)

// PoolUsage is the capacity of one storage root (a filesystem holding
// the store or trees), as statfs reports it.
type PoolUsage struct {
	Path       string `json:"path"`
	FSType     string `json:"fs_type"`
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	Trees      int    `json:"trees"`
}

// Usage is the store's inventory (DESIGN.md, "The store"; seed "One place
// to operate and inspect"). Sizes are apparent sizes of hostfork's own
// files, never called physical use; a deletion is never called reclaimed.
type Usage struct {
	MeasuredAt     time.Time `json:"measured_at"`
	ActiveEnvs     int       `json:"active_envs"`
	RetainedEnvs   int       `json:"retained_envs"`
	FailedEnvs     int       `json:"failed_envs"`
	LiveCommands   int       `json:"live_commands"`
	UnverifiedCmds int       `json:"unverified_commands"`
	LogBytes       int64     `json:"log_bytes"`
	ExportBytes    int64     `json:"export_bytes"`
	// TreesByKind counts allocated (not yet deleted) private trees.
	TreesByKind map[string]int `json:"trees_by_kind"`
	Pools       []PoolUsage    `json:"pools"`
	// CleanupBacklog counts stopped environments past their tree or
	// evidence retention that gc has not yet handled; OldestBacklog is
	// how long the oldest has waited.
	CleanupBacklog int    `json:"cleanup_backlog"`
	OldestBacklog  string `json:"oldest_backlog,omitempty"`
	// FailedOperations counts recorded cleanup errors and failed
	// creations.
	FailedOperations int `json:"failed_operations"`
	PendingIntents   int `json:"pending_intents"`
	// PendingReclamation: Btrfs snapshots deleted but whose space the
	// filesystem frees in the background.
	PendingReclamation string `json:"pending_reclamation"`
}

// Usage measures the store. It reads records and file sizes; it changes
// nothing.
func (h *Host) Usage(ctx context.Context) (*Usage, error) {
	cfg, err := h.Config()
	if err != nil {
		return nil, err
	}
	u := &Usage{MeasuredAt: time.Now().UTC(), TreesByKind: map[string]int{}, Pools: []PoolUsage{}}
	envs, err := h.reg.Envs(ctx, registry.EnvFilter{})
	if err != nil {
		return nil, err
	}
	pools := map[string]*PoolUsage{}
	addPool := func(p string) *PoolUsage {
		var fs unix.Statfs_t
		if unix.Statfs(p, &fs) != nil {
			return nil
		}
		key := p
		if pu, ok := pools[key]; ok {
			return pu
		}
		pu := &PoolUsage{Path: p, FSType: storage.FSName(int64(fs.Type)), TotalBytes: fs.Blocks * uint64(fs.Bsize), FreeBytes: fs.Bavail * uint64(fs.Bsize)}
		pools[key] = pu
		return pu
	}
	addPool(h.root)
	var oldest time.Duration
	deletedSnapshots := 0
	for _, e := range envs {
		switch e.State {
		case registry.EnvActive, registry.EnvCreating, registry.EnvStopping:
			u.ActiveEnvs++
		case registry.EnvStopped:
			u.RetainedEnvs++
		case registry.EnvFailed:
			u.FailedEnvs++
			u.FailedOperations++
		}
		u.FailedOperations += len(e.CleanupErrors)
		allocated := 0
		for _, t := range e.Trees {
			if t.State == TreeAllocated {
				allocated++
				u.TreesByKind[t.Kind]++
				if pu := addPool(filepath.Dir(filepath.Dir(t.HostPath))); pu != nil {
					pu.Trees++
				}
			} else if t.Kind == "btrfs" && e.StoppedAt != nil && time.Since(*e.StoppedAt) < 24*time.Hour {
				deletedSnapshots++
			}
		}
		u.ExportBytes += dirBytes(filepath.Join(e.RunDir, "exports"))
		if (e.State == registry.EnvStopped || e.State == registry.EnvFailed) && e.StoppedAt != nil {
			keepTrees, keepEvidence := h.retentionFor(e, cfg, GCOptions{})
			age := time.Since(*e.StoppedAt)
			due := (allocated > 0 && age >= keepTrees) || age >= keepEvidence
			if due {
				u.CleanupBacklog++
				over := age - keepEvidence
				if allocated > 0 && age-keepTrees > over {
					over = age - keepTrees
				}
				if over > oldest {
					oldest = over
				}
			}
		}
	}
	if u.CleanupBacklog > 0 {
		u.OldestBacklog = oldest.Round(time.Second).String()
	}
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{States: []string{registry.CmdReserved, registry.CmdRunning, registry.CmdUnknown}})
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		if n, _ := h.settleCommand(ctx, c); n != nil {
			c = n
		}
		switch ProcessState(c) {
		case StateAlive:
			u.LiveCommands++
		case StateUnverified:
			u.UnverifiedCmds++
		}
	}
	logs, _ := filepath.Glob(filepath.Join(h.root, "runs", "*", "commands", "*", "std*"))
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			u.LogBytes += fi.Size()
		}
	}
	ins, err := h.reg.Intents(ctx, "", registry.IntentPending)
	if err != nil {
		return nil, err
	}
	u.PendingIntents = len(ins)
	for _, p := range pools {
		u.Pools = append(u.Pools, *p)
	}
	sort.Slice(u.Pools, func(i, j int) bool { return u.Pools[i].Path < u.Pools[j].Path })
	u.PendingReclamation = "none known"
	if deletedSnapshots > 0 {
		u.PendingReclamation = "btrfs snapshots deleted in the last day may still be freeing space in the background (acknowledged, not measured)"
	}
	return u, nil
}

// BtrfsSize is an on-request measurement of one Btrfs tree's extents.
type BtrfsSize struct {
	Env        string    `json:"env"`
	Tree       string    `json:"tree"`
	Path       string    `json:"path"`
	Total      int64     `json:"total_bytes"`
	Exclusive  int64     `json:"exclusive_bytes"`
	Shared     int64     `json:"shared_bytes"`
	MeasuredAt time.Time `json:"measured_at"`
	Error      string    `json:"error,omitempty"`
}

// BtrfsSizes measures the exclusive and shared extents of every allocated
// Btrfs tree with `btrfs filesystem du` (expensive: it walks the tree's
// extents; qgroups are never enabled for it). Each figure carries the time
// it was measured.
func (h *Host) BtrfsSizes(ctx context.Context) ([]BtrfsSize, error) {
	envs, err := h.reg.Envs(ctx, registry.EnvFilter{})
	if err != nil {
		return nil, err
	}
	out := []BtrfsSize{}
	for _, e := range envs {
		for _, t := range e.Trees {
			if t.State != TreeAllocated || t.Kind != "btrfs" {
				continue
			}
			s := BtrfsSize{Env: e.ID, Tree: t.Name, Path: t.HostPath}
			b, err := exec.CommandContext(ctx, "btrfs", "filesystem", "du", "-s", "--raw", t.HostPath).Output()
			s.MeasuredAt = time.Now().UTC()
			if err != nil {
				s.Error = "btrfs filesystem du: " + err.Error()
			} else if s.Total, s.Exclusive, s.Shared, err = parseBtrfsDu(string(b)); err != nil {
				s.Error = err.Error()
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// parseBtrfsDu reads the summary line of `btrfs filesystem du -s --raw`:
// "Total Exclusive Set-shared Filename".
func parseBtrfsDu(s string) (total, excl, shared int64, err error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(lines) < 2 || len(f) < 4 {
		return 0, 0, 0, fmt.Errorf("unexpected 'btrfs filesystem du' output: %q", s)
	}
	v := make([]int64, 3)
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("unexpected 'btrfs filesystem du' output: %q", s)
		}
	}
	return v[0], v[1], v[2], nil
}
