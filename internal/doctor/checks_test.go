package doctor

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

const hybridMountinfo = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs ro,mode=755
27 26 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
28 26 0:24 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
29 26 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
30 26 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
31 26 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
40 22 7:0 / /mnt/pool\040a rw,relatime - btrfs /dev/loop0 rw,space_cache=v2,user_subvol_rm_allowed,subvolid=5,subvol=/
bad line
`

func TestParseMountinfo(t *testing.T) {
	ms := ParseMountinfo(hybridMountinfo)
	if len(ms) != 9 {
		t.Fatalf("%d mounts", len(ms))
	}
	if m := ms[8]; m.Target != "/mnt/pool a" || m.FSType != "btrfs" || !slices.Contains(m.SuperOpts, "user_subvol_rm_allowed") {
		t.Errorf("%+v", m)
	}
	if got := Propagation(ms[1]); got != "shared" {
		t.Errorf("propagation %s", got)
	}
	if got := Propagation(ms[0]); got != "private" {
		t.Errorf("propagation %s", got)
	}
	m, ok := MountOf(ms, "/mnt/pool a/x/y")
	if !ok || m.Target != "/mnt/pool a" {
		t.Errorf("MountOf: %+v", m)
	}
	if m, _ := MountOf(ms, "/var/lib/hostfork"); m.Target != "/" {
		t.Errorf("MountOf /var: %+v", m)
	}
	if m, _ := MountOf(ms, "/mnt/pool ab"); m.Target != "/" {
		t.Errorf("MountOf must not match a sibling with a common prefix: %+v", m)
	}
	v2, ro, v1 := CgroupHierarchies(ms)
	want := []V1Hier{{Mount: "/sys/fs/cgroup/systemd", Name: "systemd"}, {Mount: "/sys/fs/cgroup/memory", Controllers: []string{"memory"}},
		{Mount: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}}, {Mount: "/sys/fs/cgroup/pids", Controllers: []string{"pids"}}}
	if v2 != "/sys/fs/cgroup/unified" || ro || !reflect.DeepEqual(v1, want) {
		t.Errorf("hierarchies: %s %v %+v", v2, ro, v1)
	}
}

func TestVersions(t *testing.T) {
	for rel, want := range map[string]bool{"6.18.44-fc-v782": true, "5.14.0": true, "5.13.19": false, "4.19.0-amd64": false, "5.14-rc1": true, "garbage": false} {
		if got := linux.ReleaseAtLeast(rel, 5, 14); got != want {
			t.Errorf("linux.ReleaseAtLeast(%s) = %v", rel, got)
		}
	}
	if v, ok := SystemdVersion("systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT"); !ok || v != 252 {
		t.Errorf("%d %v", v, ok)
	}
	if _, ok := SystemdVersion("something else"); ok {
		t.Error("garbage parsed")
	}
}

func TestExecStartBinary(t *testing.T) {
	for text, want := range map[string]string{
		"[Service]\nExecStart=/usr/local/bin/hostfork reap\n":     "/usr/local/bin/hostfork",
		"[Service]\nExecStart=\nExecStart=-/opt/hf/hostfork gc\n": "/opt/hf/hostfork",
		"[Timer]\nOnCalendar=hourly\n":                            "",
		"ExecStart=@\"/x y/hostfork\" hostfork reap":              "/x y/hostfork",
	} {
		if _, got := ExecStartBinary(text); got != want {
			t.Errorf("%q: %q", text, got)
		}
	}
}

// hybridRoot is this kind of machine (HOST-NOTES.md) as facts: root,
// hybrid cgroups with an empty cgroup2, no systemd, overlay and btrfs.
func hybridRoot() *Facts {
	ms := ParseMountinfo(hybridMountinfo)
	v2, _, v1 := CgroupHierarchies(ms)
	return &Facts{
		EUID: 0, User: "root", Kernel: "6.18.44", BootID: "b00t", PidfdOK: true,
		Filesystems: map[string]bool{"overlay": true, "btrfs": true, "ext4": true},
		Cgroup: CgroupFacts{V2Mount: v2, V2Writable: true, V2RootControls: nil, V1: v1, Self: "/",
			Parent: v2 + "/hostfork", ParentSource: "default for root", ParentWritable: true, ParentUnderV2: true},
		Systemd: SystemdFacts{PID1Comm: "init", Systemctl: "/usr/bin/systemctl", Version: 252},
		NS:      NamespaceFacts{CapSysAdmin: true, MaxUserNS: 1000, RootPropagation: "private"},
		Store:   StoreFacts{Root: "/var/lib/hostfork", Exists: true, Writable: true, Registry: true, Schema: 2, BinarySchema: 2, FSType: "ext4", FreeBytes: 100 << 30, TotalBytes: 200 << 30},
		Storage: []StorageRoot{{Path: "/var/lib/hostfork", Role: "store", Exists: true, FSType: "ext4", Writable: true, Readable: true, FreeBytes: 100 << 30, MountPoint: "/"}},
		Units:   UnitFacts{Dirs: []string{"/etc/systemd/system"}},
		Verbs:   map[string]bool{"reap": true, "gc": true},
		Version: "v1.0.0 abc", Exe: "/usr/local/bin/hostfork",
	}
}

func find(t *testing.T, cs []Check, id string) Check {
	t.Helper()
	for _, c := range cs {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", id, cs)
	return Check{}
}

func TestEvaluate(t *testing.T) {
	type want struct {
		id, status string
		in         string // in Detail, Missing or Remedy
	}
	tests := []struct {
		name   string
		facts  func(*Facts)
		needs  Needs
		want   []want
		canRun bool
	}{
		{"hybrid root host", func(*Facts) {}, Needs{}, []want{
			{"cgroup.layout", "ok", "hybrid: cgroup2 at /sys/fs/cgroup/unified (controllers: none)"},
			{"cgroup.controllers", "ok", "memory: cgroup v1 at /sys/fs/cgroup/memory"},
			{"cgroup.delegation", "ok", "will be created on first use"},
			{"systemd.manager", "missing", `PID 1 is "init"`},
			{"systemd.scope-features", "missing", "systemd 252 is not PID 1"},
			{"fs.overlay", "ok", ""}, {"fs.btrfs", "ok", ""},
			{"namespaces.mount", "ok", "CAP_SYS_ADMIN"},
			{"support.units", "missing", "not installed"},
			{"store", "ok", "schema 2 (this hostfork: 2), 0 pending intents"},
		}, true},
		{"unified v2 with controllers", func(f *Facts) {
			f.Cgroup.V1 = nil
			f.Cgroup.V2Mount = "/sys/fs/cgroup"
			f.Cgroup.V2RootControls = []string{"cpu", "memory", "pids"}
		}, Needs{Limits: true}, []want{
			{"cgroup.layout", "ok", "unified"},
			{"cgroup.controllers", "ok", "memory: cgroup v2"},
		}, true},
		{"no memory controller but limits asked", func(f *Facts) {
			f.Cgroup.V1 = nil
		}, Needs{Spec: true, Limits: true}, []want{
			{"cgroup.controllers", "missing", "+memory +cpu +pids"},
		}, false},
		{"legacy v1 only", func(f *Facts) {
			f.Cgroup = CgroupFacts{V1: f.Cgroup.V1}
		}, Needs{}, []want{
			{"cgroup.layout", "degraded", "systemd.unified_cgroup_hierarchy=1"},
			{"cgroup.delegation", "missing", ""},
		}, true},
		{"non-root asks for cgroup2 without delegation", func(f *Facts) {
			f.EUID, f.User = 1000, "alice"
			f.Cgroup.Parent, f.Cgroup.ParentSource = "", ""
			f.NS.CapSysAdmin = false
		}, Needs{Spec: true, Cgroup2: true}, []want{
			{"cgroup.delegation", "missing", "HOSTFORK_CGROUP_PARENT=/sys/fs/cgroup/unified/hostfork-alice"},
			{"namespaces.idmap", "degraded", "apt-get install uidmap"},
		}, false},
		{"non-root with a delegated subtree", func(f *Facts) {
			f.EUID, f.User = 1000, "alice"
			f.Cgroup.Self = "/user.slice/user-1000.slice/session-1.scope"
			f.Cgroup.Parent = "/sys/fs/cgroup/unified/user.slice/user-1000.slice/hostfork"
			f.Cgroup.ParentSource, f.Cgroup.ParentExists, f.Cgroup.CommonWritable = "delegated to this user", true, true
		}, Needs{Spec: true, Cgroup2: true}, []want{
			{"cgroup.delegation", "ok", "user-1000.slice/hostfork (delegated to this user): exists, writable"},
		}, true},
		{"non-root parent outside its own subtree", func(f *Facts) {
			f.EUID, f.User = 1000, "alice"
			f.Cgroup.Parent, f.Cgroup.ParentSource, f.Cgroup.CommonWritable = "/sys/fs/cgroup/unified/hostfork-alice", "$HOSTFORK_CGROUP_PARENT", false
		}, Needs{Spec: true, Cgroup2: true}, []want{
			{"cgroup.delegation", "missing", "no common ancestor this user can write"},
		}, false},
		{"non-root view", func(f *Facts) {
			f.EUID = 1000
			f.NS.CapSysAdmin = false
		}, Needs{Spec: true, View: true}, []want{
			{"namespaces.mount", "ok", "views are made rootless, in a user namespace"},
		}, true},
		{"non-root view with user namespaces off", func(f *Facts) {
			f.EUID = 1000
			f.NS.CapSysAdmin, f.NS.MaxUserNS = false, 0
		}, Needs{Spec: true, View: true}, []want{
			{"namespaces.mount", "missing", "sysctl -w user.max_user_namespaces=15000"},
		}, false},
		{"non-root view on Linux 5.10", func(f *Facts) {
			f.EUID, f.Kernel = 1000, "5.10.0-28-amd64"
			f.NS.CapSysAdmin = false
		}, Needs{Spec: true, View: true}, []want{
			{"namespaces.mount", "degraded", "overlay in a user namespace needs Linux 5.11"},
		}, true},
		{"systemd 255", func(f *Facts) {
			f.Systemd = SystemdFacts{PID1Comm: "systemd", Booted: true, Version: 255}
		}, Needs{}, []want{
			{"systemd.manager", "ok", ""},
			{"systemd.scope-features", "ok", "PIDFDs at scope creation yes"},
		}, true},
		{"systemd 252 running", func(f *Facts) {
			f.Systemd = SystemdFacts{PID1Comm: "systemd", Booted: true, Version: 252}
		}, Needs{}, []want{
			{"systemd.scope-features", "degraded", "upgrade systemd to 255"},
		}, true},
		{"userns blocked by sysctls and AppArmor", func(f *Facts) {
			zero, one := 0, 1
			f.NS.UnprivUserns, f.NS.AppArmorRestrict = &zero, &one
		}, Needs{}, []want{
			{"namespaces.user", "missing", "sysctl -w kernel.unprivileged_userns_clone=1; sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"},
		}, true},
		{"btrfs tree needs a kernel without btrfs", func(f *Facts) {
			delete(f.Filesystems, "btrfs")
		}, Needs{Spec: true, Btrfs: true}, []want{
			{"fs.btrfs", "missing", "modprobe btrfs"},
		}, false},
		{"non-root btrfs pool without user_subvol_rm_allowed", func(f *Facts) {
			f.EUID = 1000
			f.Storage = append(f.Storage, StorageRoot{Path: "/mnt/pool", Role: "btrfs pool", For: "base", Exists: true, FSType: "btrfs",
				Writable: true, Readable: true, MountPoint: "/mnt/pool", SuperOpts: []string{"rw", "subvol=/"}, FreeBytes: 10 << 30})
		}, Needs{Spec: true, Btrfs: true, TreeSources: []string{"/mnt/pool/base"}}, []want{
			{"storage.btrfs-pool.base", "degraded", "mount -o remount,user_subvol_rm_allowed /mnt/pool"},
		}, true},
		{"unwritable pool used by the plan", func(f *Facts) {
			f.Storage = append(f.Storage, StorageRoot{Path: "/mnt/pool", Role: "btrfs pool", For: "base", Exists: true, FSType: "btrfs", Readable: true})
		}, Needs{Spec: true, Btrfs: true, TreeSources: []string{"/mnt/pool/base"}}, []want{
			{"storage.btrfs-pool.base", "missing", "chown root /mnt/pool"},
		}, false},
		{"store with a newer schema", func(f *Facts) { f.Store.Schema = 9 }, Needs{}, []want{
			{"store", "missing", "use the newer hostfork"},
		}, false},
		{"store with interrupted allocations", func(f *Facts) { f.Store.PendingIntents = 3 }, Needs{}, []want{
			{"store", "degraded", "hostfork reap"},
		}, true},
		{"store not created yet", func(f *Facts) {
			f.Store = StoreFacts{Root: "/home/a/.local/state/hostfork", Writable: true, FSType: "ext4", FreeBytes: 5 << 30}
		}, Needs{}, []want{
			{"store", "ok", "created on first use"},
		}, true},
		{"unwritable store", func(f *Facts) { f.Store.Writable = false }, Needs{}, []want{
			{"store", "missing", "--root DIR"},
		}, false},
		{"no pidfd", func(f *Facts) { f.PidfdOK, f.PidfdErr = false, "pidfd_open: function not implemented" }, Needs{}, []want{
			{"pidfd", "missing", "5.3"},
		}, false},
		{"units: current, moved and stale", func(f *Facts) {
			f.Units.Found = []UnitFile{
				{Path: "/etc/systemd/system/hostfork-reap.service", Binary: "/usr/local/bin/hostfork", BinaryExists: true, SameExe: true},
				{Path: "/etc/systemd/system/hostfork-reap.timer"},
				{Path: "/etc/systemd/system/hostfork-gc.service", Binary: "/opt/old/hostfork", BinaryExists: false},
				{Path: "/etc/systemd/system/hostfork-x.service", Binary: "/opt/v0/hostfork", BinaryExists: true, Version: "v0.9.0 def"},
			}
		}, Needs{}, []want{
			{"support.units", "degraded", "no longer exists (a moved binary)"},
			{"support.units", "degraded", "a stale helper"},
		}, true},
		{"units all current", func(f *Facts) {
			f.Units.Found = []UnitFile{{Path: "/etc/systemd/system/hostfork-reap.service", Binary: "/usr/local/bin/hostfork", BinaryExists: true, SameExe: true}}
		}, Needs{}, []want{{"support.units", "ok", "runs this executable"}}, true},
		{"nologin shell", func(f *Facts) {
			f.HostShell = HostShellFacts{Shell: "/usr/sbin/nologin", ShellSource: "password entry"}
		}, Needs{}, []want{
			{"env.host-shell", "degraded", "HOSTFORK_LOGIN_SHELL=/bin/bash"},
		}, true},
		{"companion present", func(f *Facts) { f.Companion = "/usr/local/bin/hostfork-serve" }, Needs{}, []want{
			{"serve.companion", "ok", "/usr/local/bin/hostfork-serve"},
		}, true},
		{"companion missing: degraded, never a blocker", func(f *Facts) {
			f.CompanionErr = "'hostfork serve' runs the companion binary hostfork-serve, which is not beside /usr/local/bin/hostfork nor on PATH"
		}, Needs{}, []want{
			{"serve.companion", "degraded", "go build -o /usr/local/bin/ ./cmd/hostfork-serve"},
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := hybridRoot()
			tc.facts(f)
			cs := Evaluate(f, tc.needs)
			for _, w := range tc.want {
				c := find(t, cs, w.id)
				text := c.Detail + " | " + c.Missing + " | " + c.Remedy
				if string(c.Status) != w.status || !strings.Contains(text, w.in) {
					t.Errorf("%s: %s: %s\nwant %s containing %q", w.id, c.Status, text, w.status, w.in)
				}
			}
			canRun, blockers := Verdict(cs, nil)
			if canRun != tc.canRun {
				t.Errorf("can run = %v, blockers %q", canRun, blockers)
			}
		})
	}
}

func TestVerdictPlan(t *testing.T) {
	ok := []Check{{ID: "a", Status: OK, Required: true}, {ID: "b", Status: Missing, Required: false}}
	if can, b := Verdict(ok, &PlanSummary{Tier: "cgroup2"}); !can || len(b) != 0 {
		t.Errorf("%v %q", can, b)
	}
	can, b := Verdict(ok, &PlanSummary{Unsupported: []string{"tree p: kind btrfs needs a btrfs subvolume"}, Error: "cgroup2 tier unavailable"})
	if can || len(b) != 2 || !strings.HasPrefix(b[0], "plan: cgroup2") {
		t.Errorf("%v %q", can, b)
	}
	bad := []Check{{ID: "x", Status: Missing, Required: true, Missing: "thing", Remedy: "do it"}}
	if can, b := Verdict(bad, nil); can || b[0] != "x: thing — remedy: do it" {
		t.Errorf("%v %q", can, b)
	}
	deg := []Check{{ID: "x", Status: Degraded, Required: true}}
	if can, _ := Verdict(deg, nil); !can {
		t.Error("degraded blocks")
	}
}
