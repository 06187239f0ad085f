package limits

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
)

// Resource is one budgeted resource.
type Resource string

// The resources an environment budget covers.
const (
	Memory Resource = "memory"
	CPU    Resource = "cpu"
	Pids   Resource = "pids"
)

// Resources lists them in report order.
var Resources = []Resource{Memory, CPU, Pids}

// Mechanism is how a resource is enforced on this host.
type Mechanism string

// Mechanisms. The empty Mechanism means unavailable (Support.Reason says why).
const (
	Cgroup2 Mechanism = "cgroup2"
	Cgroup1 Mechanism = "cgroup1"
)

// Config says where environment groups live.
type Config struct {
	// V2Parent is the cgroup2 directory whose children are environment
	// groups (e.g. /sys/fs/cgroup/hostfork). Empty: cgroup2 controllers are
	// not considered.
	V2Parent string
	// V1Parent is the path inside each cgroup v1 hierarchy under which
	// environment groups are made (e.g. "hostfork" gives
	// /sys/fs/cgroup/memory/hostfork/<name>). Empty: the hierarchy's root.
	V1Parent string
	// EnableV2 lets Detect write "+controller" to V2Parent's
	// cgroup.subtree_control when the controller is available to V2Parent
	// but not yet enabled for its children. Without it Detect changes
	// nothing and reports the controller as needing enablement.
	EnableV2 bool
}

// Support is the detection result for one resource.
type Support struct {
	Resource  Resource  `json:"resource"`
	Mechanism Mechanism `json:"mechanism,omitempty"` // "" = unavailable
	// Dir is where groups for this resource are made: V2Parent for cgroup2,
	// the hierarchy's parent directory for cgroup1.
	Dir string `json:"dir,omitempty"`
	// Reason says why the resource is unavailable, or what Create still
	// has to do (a v2 controller not yet enabled).
	Reason string `json:"reason,omitempty"`
	// Usage names the counter CPU usage evidence comes from, or why it is
	// unknown (CPU only).
	Usage string `json:"usage,omitempty"`
}

// Available reports whether the resource can be limited.
func (s Support) Available() bool { return s.Mechanism != "" }

// Host is the detected limit capability of this host for one Config.
type Host struct {
	Config
	Support []Support `json:"support"` // one per Resources entry, in order
	// cpuacctDir is the v1 cpuacct parent directory when CPU is limited
	// through v1 and cpuacct is mounted (co-mounted with cpu or on its own).
	cpuacctDir string
	// needEnable lists v2 controllers Create must still enable.
	needEnable []string
}

// For returns the Support entry of r.
func (h *Host) For(r Resource) Support {
	for _, s := range h.Support {
		if s.Resource == r {
			return s
		}
	}
	return Support{Resource: r, Reason: "unknown resource"}
}

// V1ParentDirs lists the distinct v1 parent directories groups are made in
// (for callers that own the parent and want to remove it).
func (h *Host) V1ParentDirs() []string {
	var dirs []string
	for _, s := range h.Support {
		if s.Mechanism == Cgroup1 && !slices.Contains(dirs, s.Dir) {
			dirs = append(dirs, s.Dir)
		}
	}
	if h.cpuacctDir != "" && !slices.Contains(dirs, h.cpuacctDir) {
		dirs = append(dirs, h.cpuacctDir)
	}
	return dirs
}

// v1Mount is one mounted cgroup v1 hierarchy.
type v1Mount struct {
	Path        string
	Controllers []string
	ReadOnly    bool
}

// Detect reports, for memory, cpu and pids, whether the host can limit it
// with a cgroup2 controller in cfg.V2Parent, else with a cgroup v1
// hierarchy, else why not. Only an unreadable /proc/self/mountinfo is an
// error; everything else is a per-resource reason.
func Detect(cfg Config) (*Host, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return detect(cfg, mounts), nil
}

// parseMountinfo returns the cgroup v1 hierarchies with their controllers
// (named hierarchies such as name=systemd have none and are skipped).
func parseMountinfo(r io.Reader) ([]v1Mount, error) {
	ms, err := mountinfo.GetMountsFromReader(r, mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return nil, err
	}
	var out []v1Mount
	for _, m := range ms {
		var ctrls []string
		for _, o := range strings.Split(m.VFSOptions, ",") {
			switch {
			case o == "" || o == "rw" || o == "ro" || strings.Contains(o, "="):
			case o == "clone_children" || o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods":
			default:
				ctrls = append(ctrls, o)
			}
		}
		if len(ctrls) == 0 {
			continue
		}
		ro := slices.Contains(strings.Split(m.Options, ","), "ro")
		out = append(out, v1Mount{Path: m.Mountpoint, Controllers: ctrls, ReadOnly: ro})
	}
	return out, nil
}

func findV1(mounts []v1Mount, ctrl string) (v1Mount, bool) {
	for _, m := range mounts {
		if slices.Contains(m.Controllers, ctrl) {
			return m, true
		}
	}
	return v1Mount{}, false
}

// v1KeyFile is a file the root of a v1 hierarchy has when the controller
// can enforce a limit ("" = nothing to check at the root).
var v1KeyFile = map[string]string{
	"memory": "memory.limit_in_bytes",
	"cpu":    "cpu.cfs_quota_us", // absent without CONFIG_CFS_BANDWIDTH
	"pids":   "",                 // pids.max exists only in child groups
}

func detect(cfg Config, mounts []v1Mount) *Host {
	h := &Host{Config: cfg}
	var v2Avail, v2Enabled []string
	v2Note := "no cgroup2 parent configured"
	if cfg.V2Parent != "" {
		c, err := os.ReadFile(filepath.Join(cfg.V2Parent, "cgroup.controllers"))
		if err != nil {
			v2Note = fmt.Sprintf("cgroup2 parent %s unreadable: %v", cfg.V2Parent, err)
		} else {
			v2Avail = strings.Fields(string(c))
			st, _ := os.ReadFile(filepath.Join(cfg.V2Parent, "cgroup.subtree_control"))
			v2Enabled = strings.Fields(string(st))
			v2Note = fmt.Sprintf("not a cgroup2 controller of %s (cgroup.controllers: %q; enable it in the parent's cgroup.subtree_control)",
				cfg.V2Parent, strings.Join(v2Avail, " "))
		}
	}
	for _, r := range Resources {
		ctrl := string(r)
		s := Support{Resource: r}
		switch {
		case slices.Contains(v2Enabled, ctrl):
			s.Mechanism, s.Dir = Cgroup2, cfg.V2Parent
		case slices.Contains(v2Avail, ctrl):
			if !cfg.EnableV2 {
				s.Mechanism, s.Dir = Cgroup2, cfg.V2Parent
				s.Reason = fmt.Sprintf("%s is not yet enabled in %s/cgroup.subtree_control; Create enables it", ctrl, cfg.V2Parent)
				h.needEnable = append(h.needEnable, ctrl)
				break
			}
			if err := enableV2(cfg.V2Parent, ctrl); err != nil {
				s.Reason = err.Error()
				break
			}
			s.Mechanism, s.Dir = Cgroup2, cfg.V2Parent
		default:
			m, ok := findV1(mounts, ctrl)
			if !ok {
				s.Reason = v2Note + fmt.Sprintf("; and no cgroup v1 %s hierarchy is mounted", ctrl)
				break
			}
			if reason := v1Usable(m, ctrl, cfg.V1Parent); reason != "" {
				s.Reason = v2Note + "; " + reason
				break
			}
			s.Mechanism, s.Dir = Cgroup1, filepath.Join(m.Path, cfg.V1Parent)
		}
		if r == CPU {
			s.Usage = h.cpuUsage(s, mounts)
		}
		h.Support = append(h.Support, s)
	}
	return h
}

// cpuUsage names where CPU usage evidence comes from.
func (h *Host) cpuUsage(s Support, mounts []v1Mount) string {
	switch s.Mechanism {
	case Cgroup2:
		return "cgroup2 cpu.stat usage_usec"
	case Cgroup1:
		m, ok := findV1(mounts, "cpuacct")
		if !ok {
			return "unknown: no cgroup v1 cpuacct hierarchy (cgroup2 cpu.stat usage_usec of the environment group when one is given)"
		}
		if reason := v1Usable(m, "cpuacct", h.V1Parent); reason != "" {
			return "unknown: " + reason
		}
		h.cpuacctDir = filepath.Join(m.Path, h.V1Parent)
		if slices.Contains(m.Controllers, "cpu") {
			return "cgroup1 cpuacct.usage (co-mounted with cpu)"
		}
		return "cgroup1 cpuacct.usage"
	}
	return "unknown: CPU is not limitable here (cgroup2 cpu.stat usage_usec of the environment group when one is given)"
}

// v1Usable says why groups can't be made in a v1 hierarchy, or "".
func v1Usable(m v1Mount, ctrl, parent string) string {
	if m.ReadOnly {
		return fmt.Sprintf("the cgroup v1 %s hierarchy at %s is mounted read-only", ctrl, m.Path)
	}
	if f := v1KeyFile[ctrl]; f != "" && !exists(filepath.Join(m.Path, f)) {
		return fmt.Sprintf("the cgroup v1 %s hierarchy at %s has no %s (kernel support missing)", ctrl, m.Path, f)
	}
	if err := nearestWritable(filepath.Join(m.Path, parent), m.Path); err != nil {
		return fmt.Sprintf("the cgroup v1 %s hierarchy at %s is not writable by this user: %v", ctrl, m.Path, err)
	}
	return ""
}

// enableV2 writes +ctrl to parent's cgroup.subtree_control.
func enableV2(parent, ctrl string) error {
	p := filepath.Join(parent, "cgroup.subtree_control")
	if err := cgroup.WriteFile(p, "+"+ctrl); err != nil {
		return fmt.Errorf("enabling %s in %s (a group that has processes of its own can't enable controllers for its children): %w", ctrl, p, err)
	}
	return nil
}
