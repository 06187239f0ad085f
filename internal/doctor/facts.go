package doctor

import (
	"slices"

	"github.com/moby/sys/mountinfo"

	"strconv"
	"strings"
	"time"
)

// Facts are the raw readings Evaluate decides on. ReadFacts fills them from
// the host; tests build them by hand.
type Facts struct {
	EUID    int    `json:"euid"`
	User    string `json:"user"`
	Kernel  string `json:"kernel"`
	BootID  string `json:"boot_id,omitempty"`
	BootErr string `json:"boot_id_error,omitempty"`
	Exe     string `json:"exe,omitempty"`
	Version string `json:"version,omitempty"`
	// Companion is the checked companion binary of serve and mcp ("" when
	// none was found or it was refused: CompanionErr).
	Companion    string `json:"companion,omitempty"`
	CompanionErr string `json:"companion_error,omitempty"`
	PidfdErr     string `json:"pidfd_error,omitempty"`
	PidfdOK      bool   `json:"pidfd"`
	// Filesystems are the kernel's filesystem types (/proc/filesystems).
	Filesystems map[string]bool `json:"filesystems"`
	Cgroup      CgroupFacts     `json:"cgroup"`
	Systemd     SystemdFacts    `json:"systemd"`
	NS          NamespaceFacts  `json:"namespaces"`
	Store       StoreFacts      `json:"store"`
	Storage     []StorageRoot   `json:"storage_roots"`
	Units       UnitFacts       `json:"units"`
	HostShell   HostShellFacts  `json:"host_shell"`
	// Verbs are the CLI's verbs, so remedies only name commands that
	// exist.
	Verbs map[string]bool `json:"-"`
}

// CgroupFacts describe the cgroup hierarchies and hostfork's parent group.
type CgroupFacts struct {
	// V2Mount is the cgroup2 mount point ("" when none).
	V2Mount        string   `json:"v2_mount,omitempty"`
	V2Writable     bool     `json:"v2_writable"`
	V2RootControls []string `json:"v2_root_controllers"`
	V1             []V1Hier `json:"v1,omitempty"`
	Self           string   `json:"self,omitempty"`
	Parent         string   `json:"parent,omitempty"`
	ParentSource   string   `json:"parent_source,omitempty"`
	ParentExists   bool     `json:"parent_exists"`
	ParentWritable bool     `json:"parent_writable"`
	ParentControls []string `json:"parent_controllers,omitempty"`
	ParentSubtree  []string `json:"parent_subtree_control,omitempty"`
	ParentUnderV2  bool     `json:"parent_under_v2"`
	// CommonWritable: this user can write cgroup.procs of the nearest
	// common ancestor of this process's cgroup and the parent, which the
	// kernel requires to clone or move a process from one to the other.
	CommonWritable  bool `json:"common_ancestor_writable"`
	KillFile        bool `json:"cgroup_kill"`
	KillFileChecked bool `json:"cgroup_kill_checked"`
}

// V1Hier is one mounted cgroup v1 hierarchy.
type V1Hier struct {
	Mount       string   `json:"mount"`
	Controllers []string `json:"controllers,omitempty"`
	Name        string   `json:"name,omitempty"` // named hierarchy (name=systemd)
}

// SystemdFacts describe the service manager.
type SystemdFacts struct {
	PID1Comm   string `json:"pid1_comm"`
	Booted     bool   `json:"booted"` // /run/systemd/system exists
	Systemctl  string `json:"systemctl,omitempty"`
	Version    int    `json:"version,omitempty"`
	VersionErr string `json:"version_error,omitempty"`
	// UserManager is set when this user's manager socket exists.
	UserManager bool `json:"user_manager"`
}

// NamespaceFacts describe mount and user namespace policy.
type NamespaceFacts struct {
	CapSysAdmin bool `json:"cap_sys_admin"`
	// MaxUserNS is user.max_user_namespaces (-1: unreadable).
	MaxUserNS int `json:"max_user_namespaces"`
	// UnprivUserns is kernel.unprivileged_userns_clone (nil: no such
	// sysctl, as on mainline kernels).
	UnprivUserns *int `json:"unprivileged_userns_clone,omitempty"`
	// AppArmorRestrict is kernel.apparmor_restrict_unprivileged_userns.
	AppArmorRestrict *int   `json:"apparmor_restrict_unprivileged_userns,omitempty"`
	AppArmor         bool   `json:"apparmor"`
	SELinux          string `json:"selinux,omitempty"` // enforcing | permissive | ""
	Newuidmap        string `json:"newuidmap,omitempty"`
	Newgidmap        string `json:"newgidmap,omitempty"`
	SubUID           bool   `json:"subuid"`
	SubGID           bool   `json:"subgid"`
	RootPropagation  string `json:"root_propagation,omitempty"`
	// SharedMounts counts the host mounts with shared propagation.
	SharedMounts int `json:"shared_mounts"`
}

// StoreFacts describe the store root and its registry.
type StoreFacts struct {
	Root       string `json:"root"`
	RootSource string `json:"root_source,omitempty"`
	Exists     bool   `json:"exists"`
	// Writable is for the root, or for its nearest existing ancestor when
	// the root does not exist yet (it is created on first use).
	Writable       bool           `json:"writable"`
	FSType         string         `json:"fs_type,omitempty"`
	FreeBytes      uint64         `json:"free_bytes"`
	TotalBytes     uint64         `json:"total_bytes"`
	Registry       bool           `json:"registry"`
	Schema         int            `json:"schema"`
	BinarySchema   int            `json:"binary_schema"`
	PendingIntents int            `json:"pending_intents"`
	Baselines      []BaselineFact `json:"baselines,omitempty"`
	Err            string         `json:"error,omitempty"`
}

// BaselineFact is one registered baseline.
type BaselineFact struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Kind string `json:"kind"`
}

// StorageRoot is a directory trees are allocated in or made from.
type StorageRoot struct {
	Path string `json:"path"`
	// Role: "store" (overlay upper/work, copies), "btrfs pool" (where
	// snapshots of a baseline go: its parent directory) or "baseline".
	Role       string   `json:"role"`
	For        string   `json:"for,omitempty"` // the baseline it serves
	Exists     bool     `json:"exists"`
	FSType     string   `json:"fs_type,omitempty"`
	Writable   bool     `json:"writable"`
	Readable   bool     `json:"readable"`
	Owner      uint32   `json:"owner"`
	Mode       string   `json:"mode,omitempty"`
	MountPoint string   `json:"mount_point,omitempty"`
	SuperOpts  []string `json:"super_options,omitempty"`
	FreeBytes  uint64   `json:"free_bytes"`
	Err        string   `json:"error,omitempty"`
}

// UserSubvolRmAllowed reports the btrfs mount option that lets a non-root
// owner destroy subvolumes.
func (s StorageRoot) UserSubvolRmAllowed() bool {
	return slices.Contains(s.SuperOpts, "user_subvol_rm_allowed")
}

// UnitFacts describe installed support units.
type UnitFacts struct {
	Dirs  []string   `json:"dirs"`
	Found []UnitFile `json:"found,omitempty"`
}

// UnitFile is one hostfork unit file.
type UnitFile struct {
	Path      string `json:"path"`
	ExecStart string `json:"exec_start,omitempty"`
	Binary    string `json:"binary,omitempty"`
	// SameExe: Binary is this executable (same file).
	SameExe      bool   `json:"same_exe"`
	BinaryExists bool   `json:"binary_exists"`
	Version      string `json:"version,omitempty"` // of Binary, when it differs
	// Root and RecordedVersion are the store root and build the unit was
	// written for (its X-Hostfork-Root= and X-Hostfork-Version= markers).
	Root            string `json:"root,omitempty"`
	RecordedVersion string `json:"recorded_version,omitempty"`
	Err             string `json:"error,omitempty"`
}

// HostShellFacts describe the login-shell capture the host-shell and
// toolchain policies use.
type HostShellFacts struct {
	Shell       string    `json:"shell,omitempty"`
	ShellSource string    `json:"shell_source,omitempty"`
	Cached      bool      `json:"cached"`
	CapturedAt  time.Time `json:"captured_at,omitzero"`
	Fresh       bool      `json:"fresh"`
	StaleReason string    `json:"stale_reason,omitempty"`
	Err         string    `json:"error,omitempty"`
}

// Mount is one parsed line of /proc/PID/mountinfo.
type Mount struct {
	Target    string
	Options   []string // per-mount options
	Optional  []string // shared:N, master:N, ...
	FSType    string
	Source    string
	SuperOpts []string
}

// ParseMountinfo parses mountinfo text; malformed lines are skipped.
func ParseMountinfo(text string) []Mount {
	var out []Mount
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		ms, err := mountinfo.GetMountsFromReader(strings.NewReader(line), nil)
		if err != nil || len(ms) != 1 {
			continue // malformed: skipped
		}
		m := ms[0]
		pm := Mount{Target: m.Mountpoint, Options: strings.Split(m.Options, ","), Optional: strings.Fields(m.Optional), FSType: m.FSType, Source: m.Source}
		if m.VFSOptions != "" {
			pm.SuperOpts = strings.Split(m.VFSOptions, ",")
		}
		out = append(out, pm)
	}
	return out
}

// MountOf returns the mount that holds path: the longest target that is
// path or an ancestor of it (the last such line, as later mounts hide
// earlier ones).
func MountOf(mounts []Mount, path string) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range mounts {
		if within(m.Target, path) && (!found || len(m.Target) >= len(best.Target)) {
			best, found = m, true
		}
	}
	return best, found
}

func within(dir, p string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// v1Controllers are the cgroup v1 controller names that can appear among a
// v1 hierarchy's super options.
var v1Controllers = map[string]bool{
	"cpu": true, "cpuacct": true, "cpuset": true, "memory": true, "pids": true, "blkio": true, "io": true,
	"devices": true, "freezer": true, "net_cls": true, "net_prio": true, "perf_event": true, "hugetlb": true,
	"rdma": true, "misc": true,
}

// CgroupHierarchies extracts the cgroup2 mount and the v1 hierarchies.
func CgroupHierarchies(mounts []Mount) (v2 string, v2ro bool, v1 []V1Hier) {
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if v2 == "" || m.Target == "/sys/fs/cgroup" {
				v2 = m.Target
				v2ro = slices.Contains(m.Options, "ro")
			}
		case "cgroup":
			h := V1Hier{Mount: m.Target}
			for _, o := range m.SuperOpts {
				if v1Controllers[o] {
					h.Controllers = append(h.Controllers, o)
				} else if n, ok := strings.CutPrefix(o, "name="); ok {
					h.Name = n
				}
			}
			v1 = append(v1, h)
		}
	}
	return v2, v2ro, v1
}

// Propagation returns shared, slave or private for a mount.
func Propagation(m Mount) string {
	p := "private"
	for _, o := range m.Optional {
		switch {
		case strings.HasPrefix(o, "shared:"):
			return "shared"
		case strings.HasPrefix(o, "master:"):
			p = "slave"
		case o == "unbindable":
			p = "unbindable"
		}
	}
	return p
}

// SystemdVersion parses the first line of `systemctl --version`
// ("systemd 252 (252.39-1~deb12u2)").
func SystemdVersion(out string) (int, bool) {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "systemd" {
		return 0, false
	}
	v, err := strconv.Atoi(f[1])
	return v, err == nil
}
