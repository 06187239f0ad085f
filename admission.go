package hostfork

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/internal/admit"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// WorkloadAgent marks a command as an agent workload: it takes part in
// admission (DESIGN.md, "Not overload the host").
const WorkloadAgent = "agent"

// Admission modes.
const (
	AdmitWait = string(admit.Wait)
	AdmitFail = string(admit.Fail)
	AdmitSkip = string(admit.Skip)
)

// ErrAdmissionRefused: --admit fail met a full or paused host.
var ErrAdmissionRefused = errors.New("admission refused")

const pausedKey = "admission.paused"

// CapacityReport is what `hostfork capacity` shows.
type CapacityReport struct {
	admit.Capacity
	Paused bool `json:"paused"`
	// Live lists the admitted live workloads with their samples.
	Live []LiveWorkload `json:"live"`
}

// LiveWorkload is one admitted workload and its sampled tree memory.
type LiveWorkload struct {
	Command string        `json:"command"`
	Env     string        `json:"env"`
	Argv    []string      `json:"argv"`
	Sample  *admit.Sample `json:"sample,omitempty"`
}

// Paused reports whether new admission is paused.
func (h *Host) Paused(ctx context.Context) (bool, error) {
	v, _, err := h.reg.Setting(ctx, pausedKey)
	return v == "1", err
}

// SetPaused pauses or resumes admission. Running work continues either way.
func (h *Host) SetPaused(ctx context.Context, paused bool) error {
	v := "0"
	if paused {
		v = "1"
	}
	return h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.SetSetting(pausedKey, v) })
}

// Capacity samples the host and the live agent workloads and computes the
// free slots.
func (h *Host) Capacity(ctx context.Context) (*CapacityReport, error) {
	cfg, err := h.Config()
	if err != nil {
		return nil, err
	}
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{States: []string{registry.CmdReserved, registry.CmdRunning, registry.CmdUnknown}})
	if err != nil {
		return nil, err
	}
	var live []*registry.Command
	var targets []admit.Target
	for _, c := range cmds {
		if c.WorkloadKind != WorkloadAgent {
			continue
		}
		if n, _ := h.settleCommand(ctx, c); n != nil {
			c = n
		}
		// Alive and unverified workloads keep their capacity.
		if ProcessState(c) == StateExited {
			continue
		}
		live = append(live, c)
		switch {
		case c.CgroupPath != "":
			targets = append(targets, admit.Target{Cgroup: filepath.Join(c.CgroupPath, "workload")})
		case c.Guardian != nil:
			targets = append(targets, admit.Target{PIDs: []int{c.Guardian.PID}})
		default:
			targets = append(targets, admit.Target{})
		}
	}
	samples, err := admit.Sampler{}.Sample(ctx, targets)
	if err != nil {
		return nil, err
	}
	in := admit.Input{Host: admit.SampleHost(), Share: cfg.Admission.Share}
	rep := &CapacityReport{Live: []LiveWorkload{}}
	for i, c := range live {
		var s *admit.Sample
		if i < len(samples) {
			s = &samples[i]
		}
		in.Live = append(in.Live, admit.Workload{ID: c.ID, Sample: s})
		rep.Live = append(rep.Live, LiveWorkload{Command: c.ID, Env: c.EnvID, Argv: c.Argv, Sample: s})
	}
	capa, err := admit.Compute(in)
	if err != nil {
		return nil, fmt.Errorf("admission: %v (check admission.share in %s): %w", err, ConfigFile, ErrStore)
	}
	rep.Capacity = capa
	rep.Paused, err = h.Paused(ctx)
	return rep, err
}

// admission serializes admission decisions across processes until the
// admitted command is registered (and so counted as live).
func (h *Host) admissionLock(ctx context.Context) (func(), error) {
	return lockFile(ctx, filepath.Join(h.root, "admission.lock"), 2*time.Millisecond)
}

// admitCommand blocks (mode wait), refuses (fail) or passes (skip) a new
// agent workload. On admission it returns with the admission lock held;
// the caller releases it once the command is registered.
func (h *Host) admitCommand(ctx context.Context, mode string, onWait func(reason string)) (release func(), decision string, err error) {
	m, err := admit.ParseMode(mode)
	if err != nil {
		return nil, "", fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	if m == admit.Skip {
		return func() {}, "admission skipped by request", nil
	}
	waited := false
	for {
		unlock, err := h.admissionLock(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("admission: %w", err)
		}
		rep, err := h.Capacity(ctx)
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
			return nil, "", fmt.Errorf("%s; retry later or use --admit wait: %w", d.Reason, ErrAdmissionRefused)
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
