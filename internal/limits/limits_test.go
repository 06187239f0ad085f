package limits

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
)

const hybridMountinfo = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids ro,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 30 0:38 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
42 30 0:39 / /sys/fs/cgroup/a\040b rw,relatime - cgroup cgroup rw,clone_children,freezer
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(hybridMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []v1Mount{
		{"/sys/fs/cgroup/cpu", []string{"cpu"}, false},
		{"/sys/fs/cgroup/cpuacct", []string{"cpuacct"}, false},
		{"/sys/fs/cgroup/memory", []string{"memory"}, false},
		{"/sys/fs/cgroup/pids", []string{"pids"}, true},
		{"/sys/fs/cgroup/cpu,cpuacct", []string{"cpu", "cpuacct"}, false},
		{"/sys/fs/cgroup/a b", []string{"freezer"}, false},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d mounts %+v, want %d", len(ms), ms, len(want))
	}
	for i := range want {
		if ms[i].Path != want[i].Path || strings.Join(ms[i].Controllers, ",") != strings.Join(want[i].Controllers, ",") || ms[i].ReadOnly != want[i].ReadOnly {
			t.Errorf("mount %d: got %+v, want %+v", i, ms[i], want[i])
		}
	}
}

// fakeTree writes files (relative path → content) under a temporary root.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDetect(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"v2/cgroup.controllers":         "cpu memory\n",
		"v2/cgroup.subtree_control":     "memory\n",
		"v1mem/memory.limit_in_bytes":   "",
		"v1cpu/cpu.cfs_quota_us":        "",
		"v1nobw/cpu.shares":             "",
		"v1pids/cgroup.procs":           "",
		"v1acct/cpuacct.usage":          "",
		"v1cocpu/cpu.cfs_quota_us":      "",
		"v1cocpu/cpuacct.usage":         "",
		"v2none/cgroup.controllers":     "hugetlb\n",
		"v2none/cgroup.subtree_control": "",
	})
	j := func(p string) string { return filepath.Join(root, p) }
	mem := v1Mount{Path: j("v1mem"), Controllers: []string{"memory"}}
	cpu := v1Mount{Path: j("v1cpu"), Controllers: []string{"cpu"}}
	acct := v1Mount{Path: j("v1acct"), Controllers: []string{"cpuacct"}}
	pids := v1Mount{Path: j("v1pids"), Controllers: []string{"pids"}}
	for _, tc := range []struct {
		name      string
		cfg       Config
		mounts    []v1Mount
		want      map[Resource]Mechanism
		dirs      map[Resource]string
		usage     string // prefix of the CPU usage note
		reasonHas map[Resource]string
	}{
		{
			name:   "hybrid: no v2 controllers, all v1, separate cpuacct",
			cfg:    Config{V2Parent: j("v2none"), V1Parent: "hostfork"},
			mounts: []v1Mount{mem, cpu, acct, pids},
			want:   map[Resource]Mechanism{Memory: Cgroup1, CPU: Cgroup1, Pids: Cgroup1},
			dirs:   map[Resource]string{Memory: j("v1mem/hostfork"), CPU: j("v1cpu/hostfork"), Pids: j("v1pids/hostfork")},
			usage:  "cgroup1 cpuacct.usage",
		},
		{
			name:   "v2 enabled memory; cpu available but not enabled (reported, left alone); pids via v1",
			cfg:    Config{V2Parent: j("v2")},
			mounts: []v1Mount{pids},
			want:   map[Resource]Mechanism{Memory: Cgroup2, CPU: Cgroup2, Pids: Cgroup1},
			usage:  "cgroup2",
			reasonHas: map[Resource]string{
				CPU: "not yet enabled",
			},
		},
		{
			name:   "co-mounted cpu,cpuacct",
			cfg:    Config{},
			mounts: []v1Mount{{Path: j("v1cocpu"), Controllers: []string{"cpu", "cpuacct"}}},
			want:   map[Resource]Mechanism{CPU: Cgroup1},
			usage:  "cgroup1 cpuacct.usage (co-mounted",
			reasonHas: map[Resource]string{
				Memory: "no cgroup v1 memory hierarchy",
				Pids:   "no cgroup2 parent configured",
			},
		},
		{
			name:   "v1 cpu without CFS bandwidth; read-only pids",
			cfg:    Config{},
			mounts: []v1Mount{{Path: j("v1nobw"), Controllers: []string{"cpu"}}, {Path: j("v1pids"), Controllers: []string{"pids"}, ReadOnly: true}},
			want:   map[Resource]Mechanism{},
			usage:  "unknown",
			reasonHas: map[Resource]string{
				CPU:  "cpu.cfs_quota_us",
				Pids: "read-only",
			},
		},
		{
			name:   "unreadable v2 parent",
			cfg:    Config{V2Parent: j("missing")},
			mounts: []v1Mount{mem},
			want:   map[Resource]Mechanism{Memory: Cgroup1},
			usage:  "unknown",
			reasonHas: map[Resource]string{
				CPU: "unreadable",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := detect(tc.cfg, tc.mounts)
			for _, r := range Resources {
				s := h.For(r)
				if s.Mechanism != tc.want[r] {
					t.Errorf("%s: mechanism %q, want %q (reason %q)", r, s.Mechanism, tc.want[r], s.Reason)
				}
				if d, ok := tc.dirs[r]; ok && s.Dir != d {
					t.Errorf("%s: dir %q, want %q", r, s.Dir, d)
				}
				if !s.Available() && s.Reason == "" {
					t.Errorf("%s: unavailable without a reason", r)
				}
				if want := tc.reasonHas[r]; want != "" && !strings.Contains(s.Reason, want) {
					t.Errorf("%s: reason %q lacks %q", r, s.Reason, want)
				}
			}
			if u := h.For(CPU).Usage; !strings.HasPrefix(u, tc.usage) {
				t.Errorf("cpu usage %q, want prefix %q", u, tc.usage)
			}
		})
	}
}

func TestDetectEnablesV2(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"v2/cgroup.controllers":     "cpu memory pids\n",
		"v2/cgroup.subtree_control": "",
	})
	h := detect(Config{V2Parent: filepath.Join(root, "v2"), EnableV2: true}, nil)
	for _, r := range Resources {
		if s := h.For(r); s.Mechanism != Cgroup2 || s.Reason != "" {
			t.Errorf("%s: %+v", r, s)
		}
	}
	// The fake file holds the last write; the kernel would list all three.
	b, _ := os.ReadFile(filepath.Join(root, "v2/cgroup.subtree_control"))
	if !strings.HasPrefix(string(b), "+") {
		t.Errorf("subtree_control not written: %q", b)
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, tc := range []struct {
		b  Budget
		ok bool
	}{
		{Budget{}, true},
		{Budget{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 64}, true},
		{Budget{CPUs: 0.01}, true},
		{Budget{CPUs: 0.004}, false},
		{Budget{CPUs: math.NaN()}, false},
		{Budget{CPUs: math.Inf(1)}, false},
		{Budget{CPUs: -1}, false},
		{Budget{MemoryBytes: -1}, false},
		{Budget{MemoryBytes: 4096}, false},
		{Budget{Pids: -3}, false},
	} {
		err := tc.b.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok=%v", tc.b, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v is not ErrInvalid", tc.b, err)
		}
	}
	if q := (Budget{CPUs: 0.5}).quota(); q != 50000 {
		t.Errorf("quota for 0.5 cpus = %d", q)
	}
	if q := (Budget{CPUs: 1.25}).quota(); q != 125000 {
		t.Errorf("quota for 1.25 cpus = %d", q)
	}
}

func TestCreateRefusesUnavailable(t *testing.T) {
	h := detect(Config{}, nil)
	_, err := h.Create("env", "", Budget{MemoryBytes: 64 << 20})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	for _, name := range []string{"", ".", "..", "a/b"} {
		if _, err := h.Create(name, "", Budget{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: got %v, want ErrInvalid", name, err)
		}
	}
}

func u(p *uint64) string {
	if p == nil {
		return "unknown"
	}
	return strconv.FormatUint(*p, 10)
}

func TestEvidenceFromFiles(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"v1/memory/env/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"v1/memory/env/memory.failcnt":            "17\n",
		"v1/memory/env/memory.max_usage_in_bytes": "67108864\n",
		"v1/memory/env/memory.usage_in_bytes":     "4096\n",
		"v1/cpu/env/cpu.stat":                     "nr_periods 10\nnr_throttled 4\nthrottled_time 123\n",
		"v1/cpuacct/env/cpuacct.usage":            "999\n",
		"v1/pids/env/pids.current":                "3\n",
		"v1/pids/env/pids.events":                 "max 5\n",
		"v2/env/memory.events":                    "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
		"v2/env/memory.current":                   "garbage\n",
		"v2/env/cpu.stat":                         "usage_usec 7\nnr_periods 2\nnr_throttled 1\nthrottled_usec 5\n",
		"v2only/env/cpu.stat":                     "usage_usec 11\nnr_throttled 0\n",
	})
	j := func(p string) string { return filepath.Join(root, p) }

	v1 := (&Group{
		Mechanisms: map[Resource]Mechanism{Memory: Cgroup1, CPU: Cgroup1, Pids: Cgroup1},
		V1:         map[string]string{"memory": j("v1/memory/env"), "cpu": j("v1/cpu/env"), "cpuacct": j("v1/cpuacct/env"), "pids": j("v1/pids/env")},
	}).Evidence()
	checks := []struct {
		name string
		got  *uint64
		want string
	}{
		{"v1 oom kills", v1.Memory.OOMKills, "2"},
		{"v1 ooms", v1.Memory.OOMs, "unknown"},
		{"v1 failcnt", v1.Memory.LimitHits, "17"},
		{"v1 peak", v1.Memory.Peak, "67108864"},
		{"v1 current", v1.Memory.Current, "4096"},
		{"v1 usage", ns(v1.CPU.Usage), "999"},
		{"v1 throttled", v1.CPU.Throttled, "4"},
		{"v1 throttled ns", ns(v1.CPU.ThrottledTime), "123"},
		{"v1 pids current", v1.Pids.Current, "3"},
		{"v1 pids peak (missing file)", v1.Pids.Peak, "unknown"},
		{"v1 pids max events", v1.Pids.MaxEvents, "5"},
	}
	v2 := (&Group{V2: j("v2/env"), Mechanisms: map[Resource]Mechanism{Memory: Cgroup2, CPU: Cgroup2, Pids: Cgroup2}}).Evidence()
	checks = append(checks, []struct {
		name string
		got  *uint64
		want string
	}{
		{"v2 oom kills", v2.Memory.OOMKills, "1"},
		{"v2 ooms", v2.Memory.OOMs, "1"},
		{"v2 max", v2.Memory.LimitHits, "3"},
		{"v2 peak (missing)", v2.Memory.Peak, "unknown"},
		{"v2 current (unparsable)", v2.Memory.Current, "unknown"},
		{"v2 usage", ns(v2.CPU.Usage), "7000"},
		{"v2 throttled ns", ns(v2.CPU.ThrottledTime), "5000"},
		{"v2 pids (no files)", v2.Pids.Current, "unknown"},
	}...)
	// Hybrid: CPU on v1 without cpuacct, usage from the v2 group's core
	// cpu.stat; its throttling fields are not taken from there.
	hy := (&Group{V2: j("v2only/env"), Mechanisms: map[Resource]Mechanism{CPU: Cgroup1}, V1: map[string]string{"cpu": j("v1/missing")}}).Evidence()
	checks = append(checks, []struct {
		name string
		got  *uint64
		want string
	}{
		{"hybrid usage", ns(hy.CPU.Usage), "11000"},
		{"hybrid throttled", hy.CPU.Throttled, "unknown"},
		{"hybrid memory", hy.Memory.OOMKills, "unknown"},
	}...)
	for _, c := range checks {
		if g := u(c.got); g != c.want {
			t.Errorf("%s: got %s, want %s", c.name, g, c.want)
		}
	}
	if k, known := v1.Memory.OOMKilled(); !k || !known {
		t.Errorf("v1 OOMKilled = %v,%v", k, known)
	}
	if _, known := hy.Memory.OOMKilled(); known {
		t.Error("unread OOM counter reported as known")
	}
	if hy.CPU.UsageSource != "cgroup2 cpu.stat (core)" {
		t.Errorf("hybrid usage source %q", hy.CPU.UsageSource)
	}
}

func TestV1LimitHits(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"plain/memory.failcnt":              "0\n",
		"sum/memory.failcnt":                "2\n",
		"sum/memory.memsw.failcnt":          "3\n",
		"sum/memory.memsw.limit_in_bytes":   "67108864\n",
		"memsw/memory.failcnt":              "0\n",
		"memsw/memory.memsw.failcnt":        "0\n",
		"memsw/memory.memsw.limit_in_bytes": "67108864\n",
		"nolim/memory.failcnt":              "0\n",
		"nolim/memory.memsw.failcnt":        "0\n",
		"nolim/memory.memsw.limit_in_bytes": "9223372036854771712\n",
	})
	for dir, want := range map[string]string{
		"plain":   "0",       // no memsw accounting: the memory counter is the one charged
		"sum":     "5",       // both counters count
		"memsw":   "unknown", // memsw limit set and nothing counted: not evidence
		"nolim":   "0",
		"missing": "unknown",
	} {
		if got := u(v1LimitHits(filepath.Join(root, dir))); got != want {
			t.Errorf("%s: got %s, want %s", dir, got, want)
		}
	}
}

func TestCreateWritesV2Limits(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"v2/cgroup.controllers":     "cpu memory pids\n",
		"v2/cgroup.subtree_control": "cpu memory pids\n",
		"v2/env/memory.max":         "",
		"v2/env/memory.swap.max":    "",
		"v2/env/cpu.max":            "",
		"v2/env/pids.max":           "",
		"v2/noswap/memory.max":      "",
	})
	h := detect(Config{V2Parent: filepath.Join(root, "v2")}, nil)
	env := filepath.Join(root, "v2/env")
	if _, err := h.Create("env", "", Budget{Pids: 5}); !errors.Is(err, ErrInvalid) {
		t.Errorf("cgroup2 limits without the environment's group: %v", err)
	}
	g, err := h.Create("env", env, Budget{MemoryBytes: 64 << 20, CPUs: 1.5, Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.V1) != 0 || g.V2 != env || g.Mechanisms[Memory] != Cgroup2 {
		t.Errorf("group %+v", g)
	}
	for f, want := range map[string]string{
		"memory.max":      "67108864",
		"memory.swap.max": "0",
		"cpu.max":         "150000 100000",
		"pids.max":        "64",
	} {
		if b, _ := os.ReadFile(filepath.Join(env, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if err := g.Join(12345); err != nil {
		t.Errorf("Join with no v1 groups: %v", err)
	}
	// No memory.swap.max (no swap accounting): memory.max alone.
	if _, err := h.Create("noswap", filepath.Join(root, "v2/noswap"), Budget{MemoryBytes: 1 << 30}); err != nil {
		t.Errorf("without memory.swap.max: %v", err)
	}
	// The controller's files missing in the group: the limit can't be set.
	if _, err := h.Create("noswap", filepath.Join(root, "v2/noswap"), Budget{Pids: 3}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("pids.max missing: got %v, want ErrUnavailable", err)
	}
}

// ns is a duration's nanoseconds (nil stays nil).
func ns(d *api.Duration) *uint64 {
	if d == nil {
		return nil
	}
	n := uint64(d.D())
	return &n
}
