package systemd

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// UnitState is the evidence a manager holds about a unit. A scope has no
// main process, so its state is ActiveState/SubState and its Result, not a
// MainPID or an exit status.
type UnitState struct {
	Name string `json:"name"`
	// LoadState is "loaded" for a unit the manager knows; "not-found"
	// for one that never existed or was already collected.
	LoadState   string `json:"load_state"`
	ActiveState string `json:"active_state"` // active, deactivating, inactive, failed...
	SubState    string `json:"sub_state"`    // for a scope: running, abandoned, stop-sigterm, stop-sigkill, dead, failed
	// Result is the scope's result: "success", "timeout" (the runtime
	// deadline or a stop that needed SIGKILL), "resources", "oom-kill"...
	// Scope success says nothing about the success of its commands.
	Result       string `json:"result,omitempty"`
	ControlGroup string `json:"control_group,omitempty"` // in the manager's cgroup namespace
	Delegate     bool   `json:"delegate"`
	// RuntimeMax and TimeoutStop are the deadline as the manager holds it;
	// 0 means none.
	RuntimeMax  time.Duration `json:"runtime_max"`
	TimeoutStop time.Duration `json:"timeout_stop"`
	// Transition times on the manager's realtime clock (zero if never)
	// and on its monotonic clock (since its boot; 0 if never).
	ActiveEnter       time.Time     `json:"active_enter,omitzero"`
	InactiveEnter     time.Time     `json:"inactive_enter,omitzero"`
	ActiveEnterMono   time.Duration `json:"active_enter_monotonic,omitempty"`
	InactiveEnterMono time.Duration `json:"inactive_enter_monotonic,omitempty"`
}

// Gone reports a unit the manager does not (or no longer) know.
func (s *UnitState) Gone() bool { return s.LoadState != "" && s.LoadState != "loaded" }

// Ended reports a unit that is inactive or failed.
func (s *UnitState) Ended() bool { return s.ActiveState == "inactive" || s.ActiveState == "failed" }

// State reads a unit's evidence. A unit the manager does not know is not an
// error: its LoadState says "not-found".
func (c *Conn) State(ctx context.Context, name string) (*UnitState, error) {
	st := &UnitState{Name: name}
	err := c.call(ctx, true, func(ctx context.Context, l *link) error {
		u, err := l.sd.GetUnitPropertiesContext(ctx, name)
		if err != nil {
			return err
		}
		st.LoadState = str(u["LoadState"])
		st.ActiveState = str(u["ActiveState"])
		st.SubState = str(u["SubState"])
		st.ActiveEnter = usecTime(u["ActiveEnterTimestamp"])
		st.InactiveEnter = usecTime(u["InactiveEnterTimestamp"])
		st.ActiveEnterMono = usecDuration(u["ActiveEnterTimestampMonotonic"])
		st.InactiveEnterMono = usecDuration(u["InactiveEnterTimestampMonotonic"])
		if st.LoadState != "loaded" {
			return nil
		}
		typ := strings.TrimPrefix(filepath.Ext(name), ".")
		if typ == "" {
			return nil
		}
		// Result, ControlGroup and the cgroup and timeout settings
		// belong to the unit type's interface (Scope, Service...).
		t, err := l.sd.GetUnitTypePropertiesContext(ctx, name, strings.ToUpper(typ[:1])+typ[1:])
		if err != nil {
			return err
		}
		st.Result = str(t["Result"])
		st.ControlGroup = str(t["ControlGroup"])
		st.Delegate, _ = t["Delegate"].(bool)
		st.RuntimeMax = usecDuration(t["RuntimeMaxUSec"])
		st.TimeoutStop = usecDuration(t["TimeoutStopUSec"])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the state of %s: %w", name, err)
	}
	return st, nil
}

func str(v any) string { s, _ := v.(string); return s }

func usecDuration(v any) time.Duration {
	u, ok := v.(uint64)
	if !ok || u == math.MaxUint64 || u > math.MaxInt64/1000 {
		return 0
	}
	return time.Duration(u) * time.Microsecond
}

func usecTime(v any) time.Time {
	u, ok := v.(uint64)
	if !ok || u == 0 || u == math.MaxUint64 {
		return time.Time{}
	}
	return time.UnixMicro(int64(u)).UTC()
}

// CgroupPath is where a unit's ControlGroup is in this process's view: the
// cgroup2 mount, then the manager's root (ManagerRoot; "/" for a manager in
// this process's cgroup namespace), then the ControlGroup.
func CgroupPath(mount, managerRoot, controlGroup string) string {
	return filepath.Join(mount, managerRoot, controlGroup)
}

// ManagerRoot returns the cgroup2 path, in this process's view, that the
// system manager running as pid (PID 1 of its namespaces, seen from here: 1
// on a systemd host, a container's init from the host) sees as its root. A
// system manager keeps its own process in init.scope directly below that
// root, so the root is the parent of pid's cgroup.
func ManagerRoot(pid int) (string, error) {
	p := fmt.Sprintf("/proc/%d/cgroup", pid)
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("finding the manager's cgroup root: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			if filepath.Base(rest) != "init.scope" {
				return "", fmt.Errorf("finding the manager's cgroup root: process %d is in %s, not in a system manager's init.scope", pid, rest)
			}
			return filepath.Dir(rest), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("finding the manager's cgroup root: reading %s: %w", p, err)
	}
	return "", fmt.Errorf("finding the manager's cgroup root: %s has no cgroup2 entry", p)
}
