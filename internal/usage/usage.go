package usage

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/export"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/store"
)

// Reader is what Usage needs of the engine: environments and live
// commands as every reader sees them, settled from their evidence.
type Reader interface {
	// Reconcile settles an environment that is not final (its stop is
	// due and quiet: it reads, and is recorded, stopped).
	Reconcile(ctx context.Context, env *api.Env) *api.Env
	Commands(ctx context.Context, f api.CommandFilter) ([]api.Command, error)
}

// Meter measures one store.
type Meter struct {
	root string
	reg  *records.Records
	eng  Reader
}

// New is the meter of the store at root.
func New(root string, reg *records.Records, eng Reader) *Meter {
	return &Meter{root: root, reg: reg, eng: eng}
}

// Usage measures the store. It reads records and file sizes; it changes
// nothing.
func (e *Meter) Usage(ctx context.Context) (*api.Usage, error) {
	cfg, err := store.ReadConfig(e.root)
	if err != nil {
		return nil, err
	}
	u := &api.Usage{MeasuredAt: time.Now().UTC(), TreesByKind: map[string]int{}, Pools: []api.PoolUsage{}}
	envs, err := e.reg.Envs(ctx, registry.EnvQuery{})
	if err != nil {
		return nil, err
	}
	// Count what can be proven now, as every reader does: an environment
	// whose stop is due and quiet reads (and is recorded) stopped.
	for i, env := range envs {
		if !env.State.Final() {
			envs[i] = e.eng.Reconcile(ctx, env)
		}
	}
	pools := map[string]*api.PoolUsage{}
	addPool := func(p string) *api.PoolUsage {
		fs, err := linux.StatFS(p)
		if err != nil {
			return nil
		}
		if pu, ok := pools[p]; ok {
			return pu
		}
		pu := &api.PoolUsage{Path: p, FSType: storage.FSName(fs.Type), TotalBytes: fs.TotalBytes, FreeBytes: fs.FreeBytes}
		pools[p] = pu
		return pu
	}
	addPool(e.root)
	var oldest time.Duration
	deletedSnapshots := 0
	for _, env := range envs {
		switch env.State {
		case api.EnvCreating:
			// A creation whose creator is gone is not active: reap
			// abandons it (issue 39, item 14).
			if env.Due == "" {
				u.ActiveEnvs++
			} else {
				u.CleanupBacklog++
			}
		case api.EnvActive, api.EnvStopping:
			u.ActiveEnvs++
		case api.EnvStopped:
			u.RetainedEnvs++
		case api.EnvFailed:
			u.FailedEnvs++
			u.FailedOperations++
		}
		u.FailedOperations += len(env.CleanupErrors)
		allocated := 0
		for _, t := range env.Trees {
			if t.State == api.TreeAllocated {
				allocated++
				u.TreesByKind[t.Kind]++
				if pu := addPool(filepath.Dir(filepath.Dir(t.HostPath))); pu != nil {
					pu.Trees++
				}
			} else if t.Kind == "btrfs" && env.StoppedAt != nil && time.Since(*env.StoppedAt) < 24*time.Hour {
				deletedSnapshots++
			}
		}
		u.ExportBytes += export.RecordedBytes(env.RunDir)
		if env.State.Final() && env.StoppedAt != nil {
			keepTrees, keepEvidence := retention.RetentionFor(env, cfg, retention.GCOptions{})
			age := time.Since(*env.StoppedAt)
			if (allocated > 0 && age >= keepTrees) || age >= keepEvidence { // due
				u.CleanupBacklog++
				over := age - keepEvidence
				if allocated > 0 {
					over = max(over, age-keepTrees)
				}
				oldest = max(oldest, over)
			}
		}
	}
	if u.CleanupBacklog > 0 {
		u.OldestBacklog = api.Duration(oldest.Round(time.Second))
	}
	cmds, err := e.eng.Commands(ctx, api.CommandFilter{Live: true})
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		switch c.Liveness {
		case api.Alive:
			u.LiveCommands++
		case api.Unverified:
			u.UnverifiedCmds++
		}
	}
	for _, f := range []string{registry.FileName, registry.FileName + "-wal"} {
		if fi, err := os.Stat(filepath.Join(e.root, f)); err == nil {
			u.RegistryBytes += fi.Size()
		}
	}
	logs, _ := filepath.Glob(filepath.Join(e.root, "runs", "*", "commands", "*", "std*"))
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			u.LogBytes += fi.Size()
		}
	}
	ins, err := e.reg.Intents(ctx, registry.IntentFilter{})
	if err != nil {
		return nil, err
	}
	for _, in := range ins {
		if in.State == registry.IntentPending {
			u.PendingIntents++
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pools)) {
		u.Pools = append(u.Pools, *pools[p])
	}
	u.PendingReclamation = "none known"
	if deletedSnapshots > 0 {
		u.PendingReclamation = "btrfs snapshots deleted in the last day may still be freeing space in the background (acknowledged, not measured)"
	}
	return u, nil
}

// BtrfsSizes measures the exclusive and shared extents of every allocated
// Btrfs tree with `btrfs filesystem du` (expensive: it walks the tree's
// extents; qgroups are never enabled for it). Each figure carries the time
// it was measured.
func (e *Meter) BtrfsSizes(ctx context.Context) ([]api.BtrfsSize, error) {
	envs, err := e.reg.Envs(ctx, registry.EnvQuery{})
	if err != nil {
		return nil, err
	}
	out := []api.BtrfsSize{}
	for _, env := range envs {
		for _, t := range env.Trees {
			if t.State != api.TreeAllocated || t.Kind != "btrfs" {
				continue
			}
			s := api.BtrfsSize{Env: env.ID, Tree: t.Name, Path: t.HostPath}
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
