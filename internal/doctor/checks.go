package doctor

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Versions of systemd features a scope tier relies on.
const (
	// SystemdPIDFDs: StartTransientUnit accepts PIDFDs for a scope (the
	// "PIDFDs companion" to PIDs landed for v255; DESIGN.md, "Linux
	// process ownership": "On systemd 255, PIDFD registration is available
	// during scope creation").
	SystemdPIDFDs = 255
	// SystemdDelegate: Delegate= for scope and service units (v218).
	SystemdDelegate = 218
)

// LowFreeBytes is the free space below which a store or pool is degraded.
const LowFreeBytes = 1 << 30

// Evaluate turns facts into checks. It is pure: the same facts and needs
// give the same checks.
func Evaluate(f *Facts, n Needs) []Check {
	var cs []Check
	cs = append(cs, cgroupLayout(f, n), cgroupDelegation(f, n), cgroupControllers(f, n), cgroupKill(f, n))
	cs = append(cs, systemdManager(f), systemdFeatures(f))
	cs = append(cs, mountNS(f, n), userNS(f), idMap(f))
	cs = append(cs, filesystem(f, "overlay", n.Overlay), filesystem(f, "btrfs", n.Btrfs))
	for _, r := range f.Storage {
		cs = append(cs, storageRoot(f, r, n))
	}
	cs = append(cs, pidfd(f), bootID(f), store(f), units(f), hostShell(f), companion(f))
	return cs
}

// exeDir is the directory of this executable, for remedies ("DIR" when
// unknown).
func exeDir(f *Facts) string {
	if f.Exe == "" {
		return "DIR"
	}
	return filepath.Dir(f.Exe)
}

// companion reports the binary that 'serve' and 'mcp' execute. No run
// needs it, so it never blocks.
func companion(f *Facts) Check {
	c := Check{ID: "serve.companion", Title: "API and MCP server binary (hostfork-serve)", Evidence: Read}
	switch {
	case f.Companion != "":
		c.Status, c.Detail = OK, f.Companion+": 'hostfork serve' and 'hostfork mcp' run it"
	case f.CompanionErr == "":
		c.Status, c.Detail = Skipped, "not looked for"
	default:
		c.Status, c.Detail = Degraded, f.CompanionErr
		c.Missing = "the companion binary: 'hostfork serve' and 'hostfork mcp' exit 121 without it; everything else works"
		c.Remedy = "go build -o " + exeDir(f) + "/ ./cmd/hostfork-serve (from a hostfork source tree of the same version)"
	}
	return c
}

func cgroupLayout(f *Facts, n Needs) Check {
	c := Check{ID: "cgroup.layout", Title: "cgroup layout", Evidence: Read, Required: n.Cgroup2}
	var v1 []string
	for _, h := range f.Cgroup.V1 {
		if len(h.Controllers) > 0 {
			v1 = append(v1, strings.Join(h.Controllers, "+")+" at "+h.Mount)
		}
	}
	v2ctl := join(f.Cgroup.V2RootControls)
	switch {
	case f.Cgroup.V2Mount != "" && len(v1) == 0:
		c.Status = OK
		c.Detail = fmt.Sprintf("unified (cgroup v2 only): cgroup2 at %s, controllers: %s", f.Cgroup.V2Mount, v2ctl)
	case f.Cgroup.V2Mount != "":
		c.Status = OK
		c.Detail = fmt.Sprintf("hybrid: cgroup2 at %s (controllers: %s); cgroup v1 controllers: %s", f.Cgroup.V2Mount, v2ctl, strings.Join(v1, "; "))
	case len(f.Cgroup.V1) > 0:
		c.Status = Degraded
		c.Detail = "legacy: cgroup v1 only, no cgroup2 hierarchy"
		c.Missing = "a cgroup2 hierarchy: without it there is no cgroup2 ownership tier (commands get the weaker subreaper tier)"
		c.Remedy = "mount -t cgroup2 none /sys/fs/cgroup/unified (or boot with systemd.unified_cgroup_hierarchy=1)"
	default:
		c.Status = Missing
		c.Detail = "no cgroup filesystem is mounted"
		c.Missing = "cgroups"
		c.Remedy = "mount -t cgroup2 none /sys/fs/cgroup"
	}
	if c.Status == OK && !f.Cgroup.V2Writable {
		// Fine with a delegated subtree; cgroup.delegation decides.
		c.Detail += "; its root is not writable by this user (see cgroup.delegation)"
	}
	if c.Required && c.Status != OK {
		c.Status = Missing
	}
	return c
}

func cgroupDelegation(f *Facts, n Needs) Check {
	cg := f.Cgroup
	c := Check{ID: "cgroup.delegation", Title: "delegated cgroup2 subtree", Evidence: Read, Required: n.Cgroup2}
	user := cmp.Or(f.User, fmt.Sprint(f.EUID))
	delegate := ""
	if cg.V2Mount != "" {
		d := filepath.Join(cg.V2Mount, "hostfork-"+user)
		delegate = fmt.Sprintf("sudo mkdir -p %[1]s && sudo chown %[2]s %[1]s %[1]s/cgroup.procs %[1]s/cgroup.threads %[1]s/cgroup.subtree_control && export HOSTFORK_CGROUP_PARENT=%[1]s", d, user)
	}
	switch {
	case cg.V2Mount == "":
		c.Status = Missing
		c.Detail = "no cgroup2 hierarchy"
		c.Missing = "a cgroup2 hierarchy to delegate"
		c.Remedy = "mount -t cgroup2 none /sys/fs/cgroup/unified"
	case cg.Parent == "":
		c.Status = Missing
		c.Detail = "no delegated cgroup2 subtree for " + user + ": not root, HOSTFORK_CGROUP_PARENT is not set, and no ancestor of this process's cgroup (" + cmp.Or(cg.Self, "?") + ") is owned by the user"
		c.Missing = "a cgroup2 directory this user owns"
		c.Remedy = delegate + " (this user's processes must also live inside it: clone-into-cgroup needs write access to the common ancestor; on a systemd host, systemd-run --user --scope -p Delegate=yes gives such a subtree)"
	case !cg.ParentUnderV2:
		c.Status = Missing
		c.Detail = fmt.Sprintf("cgroup parent %s (%s) is not under the cgroup2 mount %s", cg.Parent, cg.ParentSource, cg.V2Mount)
		c.Missing = "a cgroup parent inside the cgroup2 hierarchy"
		c.Remedy = "export HOSTFORK_CGROUP_PARENT=" + filepath.Join(cg.V2Mount, "hostfork")
	case !cg.ParentWritable:
		c.Status = Missing
		state := "exists"
		if !cg.ParentExists {
			state = "does not exist and can't be created"
		}
		c.Detail = fmt.Sprintf("%s (%s) %s and is not writable by %s", cg.Parent, cg.ParentSource, state, user)
		c.Missing = "write access to the cgroup parent"
		c.Remedy = delegate
	default:
		c.Status = OK
		state := "exists"
		if !cg.ParentExists {
			state = "will be created on first use"
		}
		c.Detail = fmt.Sprintf("%s (%s): %s, writable; controllers there: %s (enabled for children: %s)",
			cg.Parent, cg.ParentSource, state, join(cg.ParentControls), join(cg.ParentSubtree))
		if f.EUID != 0 && !cg.CommonWritable {
			c.Status = Missing
			c.Missing = "this process's cgroup (" + cg.Self + ") and the parent have no common ancestor this user can write, so the kernel refuses to clone commands into the parent"
			c.Remedy = "start hostfork from a process inside the delegated subtree (e.g. echo $$ > DIR/cgroup.procs as its owner, from a shell already inside it)"
		}
	}
	return c
}

func cgroupControllers(f *Facts, n Needs) Check {
	c := Check{ID: "cgroup.controllers", Title: "resource controllers (memory, cpu, pids)", Evidence: Read, Required: n.Limits}
	v2 := map[string]bool{}
	for _, x := range f.Cgroup.V2RootControls {
		v2[x] = true
	}
	for _, x := range f.Cgroup.ParentControls {
		v2[x] = true
	}
	v1 := map[string]string{}
	for _, h := range f.Cgroup.V1 {
		for _, x := range h.Controllers {
			v1[x] = h.Mount
		}
	}
	var where, missing []string
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		switch {
		case v2[ctl]:
			where = append(where, ctl+": cgroup v2")
		case v1[ctl] != "":
			where = append(where, ctl+": cgroup v1 at "+v1[ctl])
		default:
			missing = append(missing, ctl)
		}
	}
	c.Detail = strings.Join(where, "; ")
	if len(missing) == 0 {
		c.Status = OK
		return c
	}
	c.Detail = cmp.Or(c.Detail, "none")
	c.Status = Degraded
	c.Missing = "no " + strings.Join(missing, ", ") + " controller: limits on it can't be enforced"
	if f.Cgroup.V2Mount != "" {
		c.Remedy = "enable it for hostfork's groups: echo '" + "+" + strings.Join(missing, " +") + "' > " + filepath.Join(f.Cgroup.V2Mount, "cgroup.subtree_control") + " (and in every group down to the cgroup parent)"
	}
	if c.Required {
		c.Status = Missing
	}
	return c
}

func cgroupKill(f *Facts, n Needs) Check {
	c := Check{ID: "cgroup.kill", Title: "cgroup.kill (kill a whole tree at once)", Evidence: Read, Required: n.Cgroup2}
	switch {
	case f.Cgroup.KillFileChecked && f.Cgroup.KillFile:
		c.Status, c.Detail = OK, "cgroup.kill present in "+f.Cgroup.Parent
	case f.Cgroup.KillFileChecked:
		c.Status, c.Detail = Missing, "no cgroup.kill in "+f.Cgroup.Parent
	case linux.ReleaseAtLeast(f.Kernel, 5, 14):
		c.Status, c.Detail = OK, "kernel "+f.Kernel+" has cgroup.kill (5.14+)"
	default:
		c.Status, c.Detail = Missing, "kernel "+f.Kernel+" predates cgroup.kill (5.14)"
	}
	if c.Status == Missing {
		c.Missing = "cgroup.kill: the cgroup2 tier needs Linux 5.14 or later"
		c.Remedy = "upgrade the kernel to 5.14 or later, or choose --tier subreaper explicitly"
	}
	return c
}

func systemdManager(f *Facts) Check {
	s := f.Systemd
	c := Check{ID: "systemd.manager", Title: "systemd service manager", Evidence: Read}
	ver := "systemctl not installed"
	if s.Systemctl != "" {
		ver = "systemctl " + s.Systemctl
		if s.Version > 0 {
			ver += fmt.Sprintf(" (systemd %d)", s.Version)
		}
	}
	user := "no user manager for this user"
	if s.UserManager {
		user = "a user manager is running for this user"
	}
	if s.Booted {
		c.Status = OK
		c.Detail = fmt.Sprintf("PID 1 is %s and /run/systemd/system exists; %s; %s", s.PID1Comm, ver, user)
		return c
	}
	c.Status = Missing
	c.Detail = fmt.Sprintf("PID 1 is %q, not systemd, and /run/systemd/system does not exist; %s; %s", s.PID1Comm, ver, user)
	c.Missing = "a running systemd manager: the systemd-scope tier and installed support units are unavailable (the cgroup2 tier does not need systemd)"
	return c
}

func systemdFeatures(f *Facts) Check {
	s := f.Systemd
	c := Check{ID: "systemd.scope-features", Title: "systemd scope features (PIDFDs at creation, Delegate)", Evidence: Read}
	if !s.Booted {
		c.Status = Missing
		c.Detail = "no running systemd manager to create scopes"
		c.Missing = "a systemd manager"
		if s.Version > 0 {
			c.Detail += fmt.Sprintf(" (the installed systemd %d is not PID 1)", s.Version)
		}
		return c
	}
	if s.Version == 0 {
		c.Status = Degraded
		c.Detail = "systemd is running but its version is unknown (" + cmp.Or(s.VersionErr, "systemctl not found") + ")"
		c.Missing = "the systemd version"
		return c
	}
	pidfds := s.Version >= SystemdPIDFDs
	delegate := s.Version >= SystemdDelegate
	c.Detail = fmt.Sprintf("systemd %d: PIDFDs at scope creation %s (needs %d), Delegate= %s (needs %d)",
		s.Version, yesNo(pidfds), SystemdPIDFDs, yesNo(delegate), SystemdDelegate)
	switch {
	case pidfds && delegate:
		c.Status = OK
	case delegate:
		c.Status = Degraded
		c.Missing = "PIDFDs at scope creation: processes would be named by PID, which can be reused"
		c.Remedy = fmt.Sprintf("upgrade systemd to %d or later", SystemdPIDFDs)
	default:
		c.Status = Missing
		c.Missing = "Delegate= for scopes"
		c.Remedy = fmt.Sprintf("upgrade systemd to %d or later", SystemdPIDFDs)
	}
	return c
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func mountNS(f *Facts, n Needs) Check {
	c := Check{ID: "namespaces.mount", Title: "private mount namespaces (the view)", Evidence: Read, Required: n.View}
	prop := ""
	switch {
	case f.NS.SharedMounts > 0:
		prop = fmt.Sprintf("; %d host mounts are shared (/ is %s): a view is their slave, so host mounts and unmounts reach it and nothing of the view reaches the host", f.NS.SharedMounts, f.NS.RootPropagation)
	case f.NS.RootPropagation != "":
		prop = "; every host mount is private (/ is " + f.NS.RootPropagation + "): host mounts and unmounts made after an environment starts don't reach its view, and a filesystem the view still covers stays busy on the host (unmount fails with EBUSY, a loop device stays attached) until the environment stops; 'mount --make-rshared /' makes views follow the host"
	}
	if f.NS.CapSysAdmin {
		c.Status, c.Detail = OK, "CAP_SYS_ADMIN: the keeper can unshare a mount namespace and mount trees"+prop
		return c
	}
	// Without root the keeper makes a user namespace first and the view's
	// mount namespace inside it (decision 125).
	if blocked := userNS(f); blocked.Status == Missing {
		c.Status = Missing
		c.Detail = "no CAP_SYS_ADMIN, and a view without root needs a user namespace: " + blocked.Detail + prop
		c.Missing = "views without root: unprivileged user namespaces are off"
		c.Remedy = "as root: " + blocked.Remedy + " (or run hostfork as root)"
		return c
	}
	c.Status = OK
	c.Detail = "no CAP_SYS_ADMIN: views are made rootless, in a user namespace that maps this user (files of other users show as nobody, setuid gains nothing; see 'hostfork plan')" + prop
	if !kernelAtLeast(f.Kernel, 5, 11) {
		c.Status = Degraded
		c.Missing = "overlay trees without root: overlay in a user namespace needs Linux 5.11 (kernel " + f.Kernel + ")"
		c.Remedy = "use copy or btrfs trees, upgrade the kernel, or run as root"
	}
	return c
}

// kernelAtLeast reports whether release (uname -r) is at least
// major.minor; an unreadable release counts as recent.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return true
	}
	return ma > major || (ma == major && mi >= minor)
}

func userNS(f *Facts) Check {
	ns := f.NS
	c := Check{ID: "namespaces.user", Title: "unprivileged user namespaces", Evidence: Read}
	var blocks, remedies, notes []string
	if ns.MaxUserNS == 0 {
		blocks = append(blocks, "user.max_user_namespaces is 0")
		remedies = append(remedies, "sysctl -w user.max_user_namespaces=15000")
	}
	if ns.UnprivUserns != nil && *ns.UnprivUserns == 0 {
		blocks = append(blocks, "kernel.unprivileged_userns_clone is 0")
		remedies = append(remedies, "sysctl -w kernel.unprivileged_userns_clone=1")
	}
	if ns.AppArmorRestrict != nil && *ns.AppArmorRestrict == 1 {
		blocks = append(blocks, "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)")
		remedies = append(remedies, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for hostfork with the 'userns,' rule")
	}
	if ns.SELinux == "enforcing" {
		notes = append(notes, "SELinux is enforcing (a policy may still deny user namespaces; --probe tries one)")
	}
	sysctls := fmt.Sprintf("max_user_namespaces=%d", ns.MaxUserNS)
	if ns.UnprivUserns == nil {
		sysctls += ", no unprivileged_userns_clone sysctl"
	}
	if ns.AppArmorRestrict == nil {
		sysctls += ", no AppArmor userns restriction"
	}
	if len(blocks) > 0 {
		c.Status = Missing
		c.Detail = strings.Join(blocks, "; ")
		c.Missing = "unprivileged user namespaces: views without root (not needed as root)"
		c.Remedy = strings.Join(remedies, "; ")
		return c
	}
	c.Status = OK
	c.Detail = strings.Join(append([]string{"allowed (" + sysctls + ")"}, notes...), "; ")
	return c
}

func idMap(f *Facts) Check {
	ns := f.NS
	c := Check{ID: "namespaces.idmap", Title: "uid/gid mapping for user namespaces", Evidence: Read}
	tools := "newuidmap/newgidmap: " + cmp.Or(ns.Newuidmap, "absent") + ", " + cmp.Or(ns.Newgidmap, "absent")
	ranges := fmt.Sprintf("subordinate ids for %s: subuid %s, subgid %s", cmp.Or(f.User, "this user"), yesNo(ns.SubUID), yesNo(ns.SubGID))
	c.Detail = tools + "; " + ranges
	if f.EUID == 0 {
		c.Status = OK
		c.Detail += " (root maps ids itself)"
		return c
	}
	if ns.Newuidmap != "" && ns.Newgidmap != "" && ns.SubUID && ns.SubGID {
		c.Status = OK
		return c
	}
	c.Status = Degraded
	c.Missing = "mapping more than this user's own id: a user namespace can only map " + cmp.Or(f.User, "the user") + " itself"
	var rem []string
	if ns.Newuidmap == "" || ns.Newgidmap == "" {
		rem = append(rem, "apt-get install uidmap")
	}
	if !ns.SubUID || !ns.SubGID {
		rem = append(rem, "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 "+cmp.Or(f.User, "USER"))
	}
	c.Remedy = strings.Join(rem, " && ")
	return c
}

func filesystem(f *Facts, fs string, needed bool) Check {
	c := Check{ID: "fs." + fs, Title: fs + " filesystem support", Evidence: Read, Required: needed}
	if f.Filesystems[fs] {
		c.Status, c.Detail = OK, "listed in /proc/filesystems"
		return c
	}
	c.Status = Missing
	c.Detail = "not in /proc/filesystems"
	c.Missing = "the kernel's " + fs + " filesystem: " + fs + " trees can't be made"
	c.Remedy = "modprobe " + fs
	return c
}

func storageRoot(f *Facts, r StorageRoot, n Needs) Check {
	id := "storage." + r.Role
	if r.For != "" {
		id += "." + r.For
	}
	id = strings.ReplaceAll(id, " ", "-")
	c := Check{ID: id, Title: r.Role + " " + r.Path, Evidence: Read}
	for _, src := range n.TreeSources {
		if r.Role != "store" && (src == r.Path || (r.Role == "btrfs pool" && filepath.Dir(src) == r.Path)) {
			c.Required = true
		}
	}
	if r.Role == "store" {
		c.Required = len(n.TreeSources) > 0
	}
	if !r.Exists {
		if r.Role == "store" {
			c.Status, c.Detail = OK, r.Path+" does not exist yet (created on first use)"
			c.Required = false
			return c
		}
		c.Status = Missing
		c.Detail = r.Path + ": " + cmp.Or(r.Err, "does not exist")
		c.Missing = "the " + r.Role + " directory"
		c.Remedy = "re-register the baseline: hostfork baseline remove " + r.For + " && hostfork baseline add " + r.For + " PATH"
		return c
	}
	c.Detail = fmt.Sprintf("%s on %s (mount %s), owner uid %d, mode %s, %s free", r.Path, r.FSType, r.MountPoint, r.Owner, r.Mode, Human(r.FreeBytes))
	c.Status = OK
	switch r.Role {
	case "baseline":
		if !r.Readable {
			c.Status = Missing
			c.Missing = "read access to the baseline"
			c.Remedy = "make " + r.Path + " readable by this user, or run hostfork as its owner"
		}
		return c
	default:
		if !r.Writable {
			c.Status = Missing
			c.Missing = "write access: trees are allocated here"
			c.Remedy = fmt.Sprintf("chown %s %s (or run hostfork as its owner)", cmp.Or(f.User, "USER"), r.Path)
			return c
		}
	}
	if r.FSType == "btrfs" {
		rm := r.UserSubvolRmAllowed()
		c.Detail += "; user_subvol_rm_allowed: " + yesNo(rm)
		if !rm && f.EUID != 0 {
			c.Status = Degraded
			c.Missing = "non-root deletion of snapshots: without user_subvol_rm_allowed only root can remove a btrfs tree"
			c.Remedy = "mount -o remount,user_subvol_rm_allowed " + r.MountPoint + " (and add user_subvol_rm_allowed to its options in /etc/fstab)"
		}
	}
	if r.FreeBytes < LowFreeBytes && c.Status == OK {
		c.Status = Degraded
		c.Missing = "free space: only " + Human(r.FreeBytes) + " left"
		c.Remedy = "free space on " + r.MountPoint + " (hostfork gc removes retained trees past their retention)"
	}
	return c
}

func pidfd(f *Facts) Check {
	c := Check{ID: "pidfd", Title: "pidfds (signal a verified process)", Evidence: Probed, Required: true}
	if f.PidfdOK {
		c.Status, c.Detail = OK, "pidfd_open on this process works"
		return c
	}
	c.Status = Missing
	c.Detail = f.PidfdErr
	c.Missing = "pidfd_open: hostfork never signals a PID it can't pin"
	c.Remedy = "upgrade the kernel to 5.3 or later"
	return c
}

func bootID(f *Facts) Check {
	c := Check{ID: "boot-id", Title: "boot id", Evidence: Read, Required: true}
	if f.BootID != "" {
		c.Status, c.Detail = OK, f.BootID
		return c
	}
	c.Status = Missing
	c.Detail = f.BootErr
	c.Missing = "/proc/sys/kernel/random/boot_id: process identities can't be bound to this boot"
	c.Remedy = "mount procfs at /proc"
	return c
}

func store(f *Facts) Check {
	s := f.Store
	c := Check{ID: "store", Title: "store " + s.Root, Evidence: Read, Required: true}
	if s.Root != "" && s.RootSource != "" {
		c.Title += " (" + s.RootSource + ")"
	}
	switch {
	case s.Err != "" && !s.Registry:
		c.Status = Missing
		c.Detail = s.Err
		c.Missing = "a usable store root"
		c.Remedy = "choose one with --root DIR or HOSTFORK_ROOT=DIR"
		return c
	case !s.Writable:
		c.Status = Missing
		c.Detail = s.Root + " is not writable by this user"
		c.Missing = "a writable store root"
		c.Remedy = "choose one with --root DIR or HOSTFORK_ROOT=DIR"
		return c
	case !s.Exists:
		c.Status = OK
		c.Detail = fmt.Sprintf("%s does not exist yet; it is created on first use (%s, %s free)", s.Root, s.FSType, Human(s.FreeBytes))
		return c
	case !s.Registry:
		c.Status = OK
		c.Detail = fmt.Sprintf("%s has no registry yet (created on first use); %s, %s free", s.Root, s.FSType, Human(s.FreeBytes))
		return c
	}
	c.Detail = fmt.Sprintf("schema %d (this hostfork: %d), %d pending intents, %s, %s of %s free",
		s.Schema, s.BinarySchema, s.PendingIntents, s.FSType, Human(s.FreeBytes), Human(s.TotalBytes))
	c.Status = OK
	switch {
	case s.Err != "":
		c.Status = Missing
		c.Missing = "a readable registry: " + s.Err
		c.Remedy = "check the permissions of " + filepath.Join(s.Root, "registry.sqlite")
	case s.Schema > s.BinarySchema:
		c.Status = Missing
		c.Missing = fmt.Sprintf("a hostfork that knows schema %d: this one knows %d", s.Schema, s.BinarySchema)
		c.Remedy = "use the newer hostfork that wrote this store, or another store (--root)"
	case s.Schema < s.BinarySchema:
		c.Detail += "; the registry is migrated on next use"
	}
	if c.Status == OK && s.PendingIntents > 0 {
		c.Status = Degraded
		c.Missing = fmt.Sprintf("%d allocations were interrupted before they were settled", s.PendingIntents)
		if f.Verbs["reap"] {
			c.Remedy = "hostfork reap"
		}
	}
	if c.Status == OK && s.FreeBytes < LowFreeBytes {
		c.Status = Degraded
		c.Missing = "free space: only " + Human(s.FreeBytes) + " left"
		if f.Verbs["gc"] {
			c.Remedy = "hostfork gc"
		}
	}
	return c
}

func units(f *Facts) Check {
	c := Check{ID: "support.units", Title: "installed support units", Evidence: Read}
	var services []UnitFile
	for _, u := range f.Units.Found {
		if u.Binary != "" || u.Err != "" {
			services = append(services, u)
		}
	}
	if len(f.Units.Found) == 0 {
		c.Status = Missing
		c.Detail = "not installed (looked in " + strings.Join(f.Units.Dirs, ", ") + ")"
		c.Missing = "support units (optional: a periodic reaper is recovery support, not the deadline clock)"
		if f.Verbs["support"] {
			c.Remedy = "hostfork support install"
		}
		return c
	}
	var ok, bad []string
	for _, u := range f.Units.Found {
		if u.Root != "" && u.Root != f.Store.Root {
			ok = append(ok, fmt.Sprintf("%s serves the store %s, not %s", u.Path, u.Root, f.Store.Root))
		}
	}
	for _, u := range services {
		switch {
		case u.Err != "" && u.Binary == "":
			bad = append(bad, u.Path+": "+u.Err)
		case !u.BinaryExists:
			bad = append(bad, fmt.Sprintf("%s runs %s, which no longer exists (a moved binary)", u.Path, u.Binary))
		case u.SameExe:
			ok = append(ok, u.Path+" runs this executable"+recorded(u))
		case u.Version != "" && u.Version == f.Version:
			ok = append(ok, fmt.Sprintf("%s runs %s, another copy of this version", u.Path, u.Binary))
		case u.Err != "":
			bad = append(bad, fmt.Sprintf("%s runs %s, whose version is unknown (%s)", u.Path, u.Binary, u.Err))
		default:
			bad = append(bad, fmt.Sprintf("%s runs %s %s, not this hostfork (%s at %s): a stale helper", u.Path, u.Binary, u.Version, f.Version, f.Exe))
		}
	}
	c.Detail = fmt.Sprintf("%d unit files: %s", len(f.Units.Found), strings.Join(append(ok, bad...), "; "))
	if len(bad) == 0 {
		c.Status = OK
		return c
	}
	c.Status = Degraded
	c.Missing = "units that point to this executable and version"
	if f.Verbs["support"] {
		c.Remedy = "hostfork support install (rewrites the units for " + f.Exe + ")"
	} else {
		c.Remedy = "edit ExecStart= in those units to " + f.Exe + ", then systemctl daemon-reload"
	}
	return c
}

func recorded(u UnitFile) string {
	if u.RecordedVersion == "" {
		return ""
	}
	return " (written for build " + u.RecordedVersion + ")"
}

func hostShell(f *Facts) Check {
	h := f.HostShell
	c := Check{ID: "env.host-shell", Title: "login-shell capture (host-shell and toolchain policies)", Evidence: Read}
	if h.Err != "" {
		c.Status, c.Detail = Degraded, h.Err
		c.Missing = "the login-shell capture"
		return c
	}
	c.Detail = "login shell " + h.Shell + " (" + h.ShellSource + ")"
	switch base := filepath.Base(h.Shell); {
	case base == "nologin" || base == "false":
		c.Status = Degraded
		c.Missing = "a login shell: " + h.Shell + " can't run commands, so host-shell and toolchain fall back to the inherited environment"
		c.Remedy = "export HOSTFORK_LOGIN_SHELL=/bin/bash (or give the user a shell: chsh -s /bin/bash " + cmp.Or(f.User, "USER") + ")"
		return c
	}
	c.Status = OK
	switch {
	case !h.Cached:
		c.Detail += "; not captured yet (captured on first use of host-shell or toolchain)"
	case h.Fresh:
		c.Detail += "; cached capture from " + h.CapturedAt.Format(time.RFC3339) + ", fresh"
	default:
		c.Detail += "; cached capture from " + h.CapturedAt.Format(time.RFC3339) + " is stale (" + h.StaleReason + "): recaptured on next use"
	}
	return c
}
