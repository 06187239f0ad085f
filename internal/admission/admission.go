package admission

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/admit"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/store"
	"github.com/habemus-papadum/hostfork/internal/tree"
)

// WorkloadAgent marks a command as an agent workload: it takes part in
// admission.
const WorkloadAgent = "agent"

// Admission modes.
const (
	AdmitWait = string(admit.Wait)
	AdmitFail = string(admit.Fail)
	AdmitSkip = string(admit.Skip)
)

const pausedKey = "admission.paused"

// Reader is what admission needs of the engine: the live commands, as
// every reader sees them.
type Reader interface {
	Commands(ctx context.Context, f api.CommandFilter) ([]api.Command, error)
}

// Admission admits commands on one store's host.
type Admission struct {
	root string
	reg  *records.Records
	eng  Reader
}

// New is the admission of the store at root.
func New(root string, reg *records.Records, eng Reader) *Admission {
	return &Admission{root: root, reg: reg, eng: eng}
}

// Paused reports whether new admission is paused.
func (e *Admission) Paused(ctx context.Context) (bool, error) {
	v, _, err := e.reg.Setting(ctx, pausedKey)
	return v == "1", err
}

// SetPaused pauses or resumes admission. Running work continues either way.
func (e *Admission) SetPaused(ctx context.Context, paused bool) error {
	v := "0"
	if paused {
		v = "1"
	}
	var b registry.Batch
	b.SetSetting(pausedKey, v)
	return e.reg.Commit(ctx, &b)
}

// Capacity samples the host and the live agent workloads and computes the
// free slots.
func (e *Admission) Capacity(ctx context.Context) (*api.CapacityReport, error) {
	cfg, err := store.ReadConfig(e.root)
	if err != nil {
		return nil, err
	}
	cmds, err := e.eng.Commands(ctx, api.CommandFilter{Live: true})
	if err != nil {
		return nil, err
	}
	var live []api.Command
	var targets []tree.SampleTarget
	for _, c := range cmds {
		if c.WorkloadKind != WorkloadAgent {
			continue
		}
		// Alive and unverified workloads keep their capacity.
		live = append(live, c)
		switch {
		case c.CgroupPath != "":
			targets = append(targets, tree.SampleTarget{Cgroup: c.CgroupPath})
		case c.Guardian != nil:
			targets = append(targets, tree.SampleTarget{PIDs: []int{c.Guardian.PID}})
		default:
			targets = append(targets, tree.SampleTarget{})
		}
	}
	samples, err := tree.Sampler{}.Sample(ctx, targets)
	if err != nil {
		return nil, err
	}
	host := admit.Host{Cores: linux.AllowedCPUs(), MemAvailable: linux.MemAvailable()}
	in := admit.Input{Host: host, Share: cfg.Admission.Share}
	rep := &api.CapacityReport{Live: []api.LiveWorkload{}}
	for i, c := range live {
		var s *admit.Sample
		if i < len(samples) {
			s = &samples[i]
		}
		in.Live = append(in.Live, admit.Workload{ID: c.ID, Sample: s})
		rep.Live = append(rep.Live, api.LiveWorkload{Command: c.ID, Env: c.Env, Argv: c.Argv, Sample: s})
	}
	capa, err := admit.Compute(in)
	if err != nil {
		return nil, fmt.Errorf("admission: %v (check admission.share in %s): %w", err, store.ConfigFile, api.ErrStore)
	}
	rep.Capacity = capa
	rep.CPUPressure, rep.MemoryPressure = linux.Pressure("cpu"), linux.Pressure("memory")
	rep.Paused, err = e.Paused(ctx)
	return rep, err
}

// admission serializes admission decisions across processes until the
// admitted command is registered (and so counted as live).
func (e *Admission) admissionLock(ctx context.Context) (func(), error) {
	l, err := lockfile.Acquire(ctx, filepath.Join(e.root, "admission.lock"))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// Admit blocks (mode wait), refuses (fail) or passes (skip) a new
// agent workload. On admission it returns with the admission lock held;
// the caller releases it once the command is registered.
func (e *Admission) Admit(ctx context.Context, mode string, onWait func(reason string)) (release func(), decision string, err error) {
	m, err := admit.ParseMode(mode)
	if err != nil {
		return nil, "", fmt.Errorf("%v: %w", err, api.ErrInvalid)
	}
	if m == admit.Skip {
		return func() {}, "admission skipped by request", nil
	}
	waited := false
	for {
		unlock, err := e.admissionLock(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("admission: %w", err)
		}
		rep, err := e.Capacity(ctx)
		if err != nil {
			unlock()
			return nil, "", err
		}
		d := admit.Decide(rep.Capacity, m, rep.Paused)
		switch d.Verdict {
		case admit.Admit:
			if waited {
				d.Reason += " (after waiting)"
			}
			return unlock, d.Reason, nil
		case admit.Refuse:
			unlock()
			return nil, "", fmt.Errorf("%s; retry later or use --admit wait: %w", d.Reason, api.ErrAdmissionRefused)
		}
		unlock()
		if !waited && onWait != nil {
			onWait(d.Reason)
		}
		waited = true
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("waiting for admission (%s): %w", d.Reason, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
