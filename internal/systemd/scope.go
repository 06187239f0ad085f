package systemd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Deadline is the lifetime contract of a scope (DESIGN.md, "Deadline";
// seed 001, "Lifetime, recovery and forensic evidence"): MaxRuntime runs
// from the scope's activation to its force-stop, termination grace
// included. The manager sends SIGTERM to every process of the scope at
// MaxRuntime-Grace and SIGKILL at MaxRuntime, on its monotonic clock,
// without any help from hostfork.
//
// A caller whose environment was activated before the scope passes the
// remaining budget, never a fresh one: new scopes don't extend a deadline.
type Deadline struct {
	MaxRuntime time.Duration
	Grace      time.Duration
}

// Properties returns the unit properties that express d:
// RuntimeMaxUSec = MaxRuntime-Grace and TimeoutStopUSec = Grace. (Setting
// RuntimeMaxUSec to MaxRuntime and a stop timeout after it would run past
// the deadline by the grace.) Both must be at least a microsecond, since
// systemd reads 0 as "no limit".
func (d Deadline) Properties() ([]sd.Property, error) {
	if d.Grace < time.Microsecond {
		return nil, fmt.Errorf("%w: a deadline needs a grace of at least 1µs (got %v); 0 would mean no stop timeout at all", ErrInvalid, d.Grace)
	}
	if d.MaxRuntime-d.Grace < time.Microsecond {
		return nil, fmt.Errorf("%w: max runtime %v must exceed the grace %v (the grace is part of it)", ErrInvalid, d.MaxRuntime, d.Grace)
	}
	return []sd.Property{
		{Name: "RuntimeMaxUSec", Value: dbus.MakeVariant(uint64((d.MaxRuntime - d.Grace) / time.Microsecond))},
		{Name: "TimeoutStopUSec", Value: dbus.MakeVariant(uint64(d.Grace / time.Microsecond))},
	}, nil
}

// Members are the processes a scope starts with.
type Members struct {
	// PIDFDs are pidfds of the processes. They are sent when the manager
	// takes them (systemd >= 255, see PIDFDsSince).
	PIDFDs []int
	// PIDs are the same processes' PIDs as the manager's PID namespace
	// numbers them (for a container's manager: the PIDs inside it). They
	// are sent only when ScopeOptions.AllowPIDs is set and PIDFDs can't
	// be: a PID can be reused before the manager reads it.
	PIDs []uint32
}

// ScopeOptions are the optional settings of a scope. Delegate=yes and
// CollectMode=inactive-or-failed are always set.
type ScopeOptions struct {
	Slice       string // e.g. "hostfork.slice"; "" leaves the manager's default
	Description string
	// Deadline, if not nil, is enforced by the manager (see Deadline).
	Deadline *Deadline
	// AllowPIDs permits numeric PIDs when the processes can't be handed
	// over as PIDFDs (an older manager, or no PIDFDs given). The Scope
	// reports which membership was used and why.
	AllowPIDs bool
	// Ref pins the unit to this connection (AddRef=yes) so that it stays
	// loaded, and its Result readable, after it ends, until Close or a
	// broken connection. Without it an ended scope is collected at
	// once.
	Ref bool
}

// Membership values of Scope.
const (
	ByPIDFDs = "PIDFDs"
	ByPIDs   = "PIDs"
)

// Scope is a scope the manager holds active, as verified after creation.
type Scope struct {
	Name string `json:"name"`
	// Membership says how the processes were handed over: PIDFDs or PIDs.
	Membership string `json:"membership"`
	// Fallback says why PIDs were used, when they were.
	Fallback       string `json:"fallback,omitempty"`
	ManagerVersion string `json:"manager_version"`
	// CallLatency is how long StartTransientUnit took to answer;
	// JobLatency how long its job then took to finish.
	CallLatency time.Duration `json:"call_latency"`
	JobLatency  time.Duration `json:"job_latency"`
	// State is the unit as read back after its start job finished.
	State *UnitState `json:"state"`
}

// CheckUnitName accepts a unit name of the given type suffix (".scope")
// made of the characters systemd allows: [A-Za-z0-9:_.\-@\\].
func CheckUnitName(name, suffix string) error {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok || base == "" || len(name) > 255 {
		return fmt.Errorf("%w: unit name %q must be a non-empty name ending in %s", ErrInvalid, name, suffix)
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_.-@\\", c) >= 0) {
			return fmt.Errorf("%w: unit name %q has a character systemd does not allow (%q); escape it as systemd-escape does", ErrInvalid, name, c)
		}
	}
	return nil
}

// scopeProperties builds the StartTransientUnit properties and decides the
// membership; it is pure so that the decision has table tests.
func scopeProperties(m Members, opts ScopeOptions, version string) (props []sd.Property, membership, fallback string, err error) {
	if len(m.PIDFDs) == 0 && len(m.PIDs) == 0 {
		return nil, "", "", fmt.Errorf("%w: a scope needs at least one process", ErrInvalid)
	}
	pidfdsOK := MajorVersion(version) >= PIDFDsSince
	switch {
	case len(m.PIDFDs) > 0 && pidfdsOK:
		fds := make([]dbus.UnixFD, len(m.PIDFDs))
		for i, fd := range m.PIDFDs {
			fds[i] = dbus.UnixFD(fd)
		}
		props = append(props, sd.Property{Name: "PIDFDs", Value: dbus.MakeVariant(fds)})
		membership = ByPIDFDs
	case len(m.PIDFDs) > 0 && (!opts.AllowPIDs || len(m.PIDs) == 0):
		return nil, "", "", fmt.Errorf("%w: systemd %s takes PIDFDs at scope creation only from version %d; upgrade systemd, or allow numeric PIDs explicitly (the tier then reports them)", ErrPIDFDsUnsupported, version, PIDFDsSince)
	case len(m.PIDFDs) > 0:
		fallback = fmt.Sprintf("systemd %s takes no PIDFDs at scope creation (needs %d); numeric PIDs were allowed", version, PIDFDsSince)
		membership = ByPIDs
	case !opts.AllowPIDs:
		return nil, "", "", fmt.Errorf("%w: only numeric PIDs were given, and a PID can be reused before the manager reads it; pass PIDFDs, or allow PIDs explicitly", ErrInvalid)
	default:
		fallback = "only numeric PIDs were given"
		membership = ByPIDs
	}
	if membership == ByPIDs {
		props = append(props, sd.PropPids(m.PIDs...))
	}
	props = append(props,
		sd.Property{Name: "Delegate", Value: dbus.MakeVariant(true)},
		sd.Property{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	)
	if opts.Slice != "" {
		if err := CheckUnitName(opts.Slice, ".slice"); err != nil {
			return nil, "", "", err
		}
		props = append(props, sd.PropSlice(opts.Slice))
	}
	if opts.Description != "" {
		props = append(props, sd.PropDescription(opts.Description))
	}
	if opts.Ref {
		props = append(props, sd.Property{Name: "AddRef", Value: dbus.MakeVariant(true)})
	}
	if opts.Deadline != nil {
		dp, err := opts.Deadline.Properties()
		if err != nil {
			return nil, "", "", err
		}
		props = append(props, dp...)
	}
	return props, membership, fallback, nil
}

// StartScope creates the transient scope name (which must end in ".scope")
// holding the given processes, with Delegate=yes,
// CollectMode=inactive-or-failed and, if set, the manager-enforced
// deadline. It waits for the start job, then reads the unit back and
// returns only when the manager holds it active, with a cgroup and with
// the requested deadline; otherwise it stops what it created and returns
// ErrNotActive. PIDFDs are used when the manager takes them; numeric PIDs
// only when opts.AllowPIDs allows them, and the Scope says so.
//
// StartScope is not retried on a broken connection. When it fails after
// the request was sent (a lost reply, a failed job, a state that does not
// verify), it stops the scope of that name, best effort, unless the name
// was already taken (ErrUnitExists).
func (c *Conn) StartScope(ctx context.Context, name string, m Members, opts ScopeOptions) (*Scope, error) {
	if err := CheckUnitName(name, ".scope"); err != nil {
		return nil, err
	}
	version, err := c.Version(ctx)
	if err != nil {
		return nil, err
	}
	props, membership, fallback, err := scopeProperties(m, opts, version)
	if err != nil {
		return nil, err
	}
	s := &Scope{Name: name, Membership: membership, Fallback: fallback, ManagerVersion: version}
	sent := false
	err = c.call(ctx, false, func(ctx context.Context, l *link) error {
		ch := make(chan string, 1)
		t0 := time.Now()
		sent = true
		if _, err := l.sd.StartTransientUnitContext(ctx, name, "fail", props, ch); err != nil {
			return fmt.Errorf("creating scope %s: %w", name, err)
		}
		s.CallLatency = time.Since(t0)
		result, err := waitJob(ctx, l, ch)
		s.JobLatency = time.Since(t0) - s.CallLatency
		if err != nil {
			return fmt.Errorf("waiting for the start job of %s: %w", name, err)
		}
		if result != "done" {
			return fmt.Errorf("starting scope %s: job result %q: %w", name, result, ErrJobFailed)
		}
		return nil
	})
	if err != nil {
		// A lost reply or a failed job may hide a scope that was made;
		// a name that was taken is someone else's and stays.
		if sent && !errors.Is(err, ErrUnitExists) {
			c.abandon(ctx, name)
		}
		return nil, err
	}
	st, err := c.State(ctx, name)
	if err == nil {
		err = st.checkStarted(opts.Deadline)
	}
	if err != nil {
		c.abandon(ctx, name)
		return nil, fmt.Errorf("scope %s after creation: %w", name, err)
	}
	s.State = st
	return s, nil
}

// abandon stops, best effort and without waiting, a scope StartScope may
// have created but could not verify: nothing unverified is left running.
func (c *Conn) abandon(ctx context.Context, name string) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CallTimeout)
	defer cancel()
	_ = c.call(stopCtx, true, func(ctx context.Context, l *link) error {
		_, err := l.sd.StopUnitContext(ctx, name, "replace", nil)
		return err
	})
}

// checkStarted verifies what StartScope promises: active, with a cgroup,
// delegated, with the requested deadline.
func (st *UnitState) checkStarted(d *Deadline) error {
	if st.ActiveState != "active" {
		return fmt.Errorf("%w: ActiveState %q (SubState %q, Result %q)", ErrNotActive, st.ActiveState, st.SubState, st.Result)
	}
	if st.ControlGroup == "" {
		return fmt.Errorf("%w: no ControlGroup", ErrNotActive)
	}
	if !st.Delegate {
		return fmt.Errorf("%w: Delegate is off", ErrNotActive)
	}
	if d != nil && (st.RuntimeMax != d.MaxRuntime-d.Grace || st.TimeoutStop != d.Grace) {
		return fmt.Errorf("%w: the manager holds RuntimeMax %v and TimeoutStop %v, not %v and %v", ErrNotActive, st.RuntimeMax, st.TimeoutStop, d.MaxRuntime-d.Grace, d.Grace)
	}
	return nil
}

// waitJob waits for a job's result, noticing a broken connection (whose
// job signals would never come).
func waitJob(ctx context.Context, l *link, ch <-chan string) (string, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-ch:
			return r, nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
			if !l.connected() {
				return "", ErrDisconnected
			}
		}
	}
}

// StopUnit stops a unit and waits until its stop job finished: for a scope,
// until its processes are gone, SIGTERM first and SIGKILL after the unit's
// TimeoutStopUSec. The wait is bounded by ctx and Options.JobTimeout; if the
// connection breaks during it, StopUnit reconnects and waits by reading the
// unit's state instead. Stopping a unit that is not loaded succeeds.
func (c *Conn) StopUnit(ctx context.Context, name string) (*UnitState, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.JobTimeout)
	defer cancel()
	var result string
	err := c.call(ctx, true, func(cctx context.Context, l *link) error {
		ch := make(chan string, 1)
		if _, err := l.sd.StopUnitContext(cctx, name, "replace", ch); err != nil {
			return err
		}
		// The job may take the unit's whole stop timeout: wait on ctx,
		// not on the per-call timeout.
		r, err := waitJob(ctx, l, ch)
		result = r
		if errors.Is(err, ErrDisconnected) {
			return nil // fall through to polling below
		}
		return err
	})
	if errors.Is(err, ErrNoSuchUnit) {
		return c.State(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("stopping %s: %w", name, err)
	}
	if result != "" && result != "done" {
		st, _ := c.State(ctx, name)
		return st, fmt.Errorf("stopping %s: job result %q: %w", name, result, ErrJobFailed)
	}
	for {
		st, err := c.State(ctx, name)
		if err == nil && (st.Gone() || st.Ended()) {
			return st, nil
		}
		if errors.Is(err, ErrClosed) {
			return nil, fmt.Errorf("stopping %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("still %s/%s", st.ActiveState, st.SubState)
			}
			return st, fmt.Errorf("stopping %s: %w (%w)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MoveDeadline moves a running scope's deadline (Deadline) to
// deadlineMono on the monotonic clock the manager shares with the caller:
// RuntimeMaxUSec counts from the unit's activation, so it becomes
// deadlineMono − grace − ActiveEnterTimestampMonotonic. The unit is read
// back and the manager must hold the new value. A manager that can't
// change a running scope's RuntimeMaxUSec (systemd 252 can't) answers
// with an error matching ErrReadOnly, and nothing changed.
func (c *Conn) MoveDeadline(ctx context.Context, name string, deadlineMono, grace time.Duration) error {
	st, err := c.State(ctx, name)
	if err != nil {
		return err
	}
	if st.Gone() || st.Ended() || st.ActiveEnterMono == 0 {
		return fmt.Errorf("moving the deadline of %s: the unit is %s/%s: %w", name, st.LoadState, st.ActiveState, ErrInvalid)
	}
	rt := (deadlineMono - grace - st.ActiveEnterMono).Truncate(time.Microsecond)
	if rt < time.Microsecond {
		rt = time.Microsecond // 0 would mean no limit: stop now
	}
	err = c.call(ctx, true, func(ctx context.Context, l *link) error {
		return l.sd.SetUnitPropertiesContext(ctx, name, true, sd.Property{Name: "RuntimeMaxUSec", Value: dbus.MakeVariant(uint64(rt / time.Microsecond))})
	})
	if err != nil {
		return fmt.Errorf("moving the deadline of %s: %w", name, err)
	}
	if st, err = c.State(ctx, name); err != nil {
		return err
	}
	if st.RuntimeMax != rt {
		return fmt.Errorf("moving the deadline of %s: the manager holds RuntimeMaxUSec %v, not %v (systemd too old to change it at runtime?): %w", name, st.RuntimeMax, rt, ErrInvalid)
	}
	return nil
}
