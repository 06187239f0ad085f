package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func statfsType(path string) int64 {
	var sf unix.Statfs_t
	if unix.Statfs(path, &sf) != nil {
		return 0
	}
	return int64(sf.Type)
}

func check(t *testing.T, r *doctor.Report, id string) doctor.Check {
	t.Helper()
	c := r.Find(id)
	if c == nil {
		t.Fatalf("no check %s", id)
	}
	return *c
}

// The report on this machine matches what the kernel says, found here
// without doctor's parser: the filesystem type of the cgroup mount points
// (HOST-NOTES.md: hybrid, an empty cgroup2 at /sys/fs/cgroup/unified,
// memory/cpu/pids on v1, no systemd, overlay and btrfs).
func TestReportOnThisHost(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOSTFORK_CGROUP_PARENT", "")
	r := doctor.Run(context.Background(), doctor.Options{ReadOptions: doctor.ReadOptions{
		Root: filepath.Join(dir, "store"), UnitDirs: []string{filepath.Join(dir, "units")}}})

	layout := check(t, r, "cgroup.layout")
	ctl := check(t, r, "cgroup.controllers")
	unifiedIsV2 := statfsType("/sys/fs/cgroup/unified") == unix.CGROUP2_SUPER_MAGIC
	rootIsV2 := statfsType("/sys/fs/cgroup") == unix.CGROUP2_SUPER_MAGIC
	v1 := map[string]bool{}
	for _, c := range []string{"memory", "cpu", "pids"} {
		v1[c] = statfsType("/sys/fs/cgroup/"+c) == unix.CGROUP_SUPER_MAGIC
	}
	switch {
	case unifiedIsV2 && v1["memory"]:
		if layout.Status != doctor.OK || !strings.Contains(layout.Detail, "hybrid: cgroup2 at /sys/fs/cgroup/unified") {
			t.Errorf("hybrid host reported as %s: %s", layout.Status, layout.Detail)
		}
		got := r.Facts.Cgroup.V2RootControls
		if len(got) > 1 || (len(got) == 1 && got[0] != "hugetlb") {
			t.Errorf("cgroup2 root controllers %v; this kind of host has none or hugetlb", got)
		}
		for c, on := range v1 {
			if on && !strings.Contains(ctl.Detail, c+": cgroup v1 at /sys/fs/cgroup/") {
				t.Errorf("%s on v1 not reported: %s", c, ctl.Detail)
			}
		}
		if !r.Facts.Cgroup.V2Writable && os.Geteuid() == 0 {
			t.Error("the cgroup2 mount should be writable for root")
		}
	case rootIsV2:
		if !strings.HasPrefix(layout.Detail, "unified") {
			t.Errorf("unified host reported as %s", layout.Detail)
		}
	default:
		t.Logf("neither hybrid nor unified here: %s", layout.Detail)
	}

	booted := false
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		booted = true
	}
	if sd := check(t, r, "systemd.manager"); (sd.Status == doctor.OK) != booted {
		t.Errorf("systemd booted=%v, reported %s: %s", booted, sd.Status, sd.Detail)
	}
	fsList, _ := os.ReadFile("/proc/filesystems")
	for _, fs := range []string{"overlay", "btrfs"} {
		has := strings.Contains(string(fsList), "\t"+fs+"\n")
		if c := check(t, r, "fs."+fs); (c.Status == doctor.OK) != has {
			t.Errorf("%s in /proc/filesystems: %v, reported %s", fs, has, c.Status)
		}
	}
	if c := check(t, r, "store"); c.Status != doctor.OK || !strings.Contains(c.Detail, "created on first use") {
		t.Errorf("store: %+v", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); err == nil {
		t.Error("doctor created the store")
	}
	if c := check(t, r, "support.units"); c.Status != doctor.Missing || !strings.Contains(c.Detail, "not installed") {
		t.Errorf("units: %+v", c)
	}
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if c := check(t, r, "boot-id"); c.Detail != strings.TrimSpace(string(b)) {
		t.Errorf("boot id %q", c.Detail)
	}
	if !r.CanRun {
		t.Errorf("the default run should be possible: %q", r.Blockers)
	}
}

// snapshot is what the probes could leave behind: mounts with the probes'
// name or inside the store, every directory below the test's cgroup group,
// the store root's entries and probe directories in the temporary
// directory.
func snapshot(t *testing.T, cgroupBase, store string) []string {
	t.Helper()
	var out []string
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range doctor.ParseMountinfo(string(b)) {
		// Other tests on this host mount things too: only what a probe
		// could have made counts.
		if strings.Contains(m.Target, doctor.ProbePrefix) || strings.HasPrefix(m.Target, store+"/") || m.Target == store {
			out = append(out, "mount "+m.Target)
		}
	}
	_ = filepath.WalkDir(cgroupBase, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, "cgroup "+p)
		}
		return nil
	})
	ents, _ := os.ReadDir(store)
	for _, e := range ents {
		out = append(out, "store "+e.Name())
	}
	tmp, _ := os.ReadDir(os.TempDir())
	for _, e := range tmp {
		if strings.Contains(e.Name(), doctor.ProbePrefix) {
			out = append(out, "tmp "+e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func fakeLoginShell(t *testing.T) {
	p := filepath.Join(t.TempDir(), "login-shell")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nshift; exec /bin/sh \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(launchenv.LoginShellEnv, p)
}

func probeAndCompare(t *testing.T, store string) *doctor.Report {
	t.Helper()
	base := testutil.CgroupParent(t)
	// A parent two levels below an existing group: the cgroup probe
	// creates both and must remove both.
	parent := filepath.Join(base, "sub", "hostfork")
	fakeLoginShell(t)
	before := snapshot(t, base, store)
	r := doctor.Run(context.Background(), doctor.Options{Probe: true, ReadOptions: doctor.ReadOptions{
		Root: store, CgroupParent: parent, UnitDirs: []string{}}})
	after := snapshot(t, base, store)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("the probes left something behind or removed something:\nbefore %q\nafter  %q", before, after)
	}
	for _, c := range r.Checks {
		if c.Evidence != doctor.Probed || c.Status == doctor.Skipped {
			continue
		}
		if c.Status != doctor.OK {
			t.Errorf("%s: %s: %s (%s)", c.ID, c.Status, c.Detail, c.Missing)
		}
	}
	for _, id := range []string{"probe.cgroup", "probe.mount-namespace", "probe.overlay", "probe.pidfd", "probe.cleanup"} {
		if c := check(t, r, id); c.Status != doctor.OK {
			t.Errorf("%s: %s", id, c.Status)
		}
	}
	return r
}

func TestProbesLeaveNothingBehind(t *testing.T) {
	testutil.RequireRoot(t)
	store := t.TempDir()
	r := probeAndCompare(t, store)
	if c := check(t, r, "probe.btrfs"); statfsType(store) != unix.BTRFS_SUPER_MAGIC && c.Status != doctor.Skipped {
		t.Errorf("probe.btrfs without a btrfs root: %+v", c)
	}
}

func TestProbesOnBtrfsStore(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	store := filepath.Join(mnt, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	r := probeAndCompare(t, store)
	if c := check(t, r, "probe.btrfs.store"); c.Status != doctor.OK || !strings.Contains(c.Detail, "destroyed the snapshot") {
		t.Errorf("probe.btrfs.store: %+v", c)
	}
	if c := check(t, r, "storage.store"); !strings.Contains(c.Detail, "user_subvol_rm_allowed: no") {
		t.Errorf("storage.store: %+v", c)
	}
}

// Support units are found and compared with this executable: the same
// file, a moved binary, and another build (asked with 'version --json').
func TestSupportUnits(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old-hostfork")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho '{\"version\":\"v0.1.0\",\"commit\":\"0ld\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	units := filepath.Join(dir, "units")
	if err := os.Mkdir(units, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(units, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hostfork-reap.service", "[Unit]\nX-Hostfork-Version=v1 abc\nX-Hostfork-Root="+dir+"/store\n[Service]\nExecStart="+exe+" reap\n")
	write("hostfork-reap.timer", "[Timer]\nOnCalendar=hourly\n")
	write("hostfork-gc.service", "[Service]\nExecStart=-/nonexistent/hostfork gc\n")
	write("hostfork-old.service", "[Service]\nExecStart="+old+" reap\n")
	write("other.service", "[Service]\nExecStart=/bin/true\n")
	r := doctor.Run(context.Background(), doctor.Options{ReadOptions: doctor.ReadOptions{
		Root: filepath.Join(dir, "store"), UnitDirs: []string{units}, Exe: exe, Version: "v1 abc"}})
	c := check(t, r, "support.units")
	for _, want := range []string{"4 unit files", "hostfork-reap.service runs this executable (written for build v1 abc)",
		"/nonexistent/hostfork, which no longer exists", old + " v0.1.0 0ld, not this hostfork"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("support.units lacks %q: %s", want, c.Detail)
		}
	}
	if c.Status != doctor.Degraded || c.Remedy == "" {
		t.Errorf("support.units: %+v", c)
	}
}
