package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writeBlocks writes a file of n bytes with writes of block bytes each.
func writeBlocks(t *testing.T, path string, n, block int, fill byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, block)
	for i := range b {
		b[i] = fill + byte(i)
	}
	for off := 0; off < n; off += block {
		if _, err := f.Write(b[:min(block, n-off)]); err != nil {
			t.Fatal(err)
		}
	}
}

// fileHugeKiB is /proc/meminfo's FileHugePages: the page cache held in
// PMD-sized folios, system-wide.
func fileHugeKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "FileHugePages:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("meminfo: %q", line)
			}
			return n
		}
	}
	return 0
}

// TestProbeExe: a file written in 2 MiB blocks is held in 2 MiB folios
// where the kernel and file system keep large folios at all, and one
// written in 64 KiB blocks is not (docs/decisions.md, entry 78); the probe
// must tell them apart and count the ranges right. The control, apart from
// the probe, is the system's count of such folios (meminfo's
// FileHugePages), which the 2 MiB file's writes raise by its size where
// the kernel keeps them.
func TestProbeExe(t *testing.T) {
	dir := t.TempDir()
	huge := pmdSize()
	big := filepath.Join(dir, "written-2m")
	small := filepath.Join(dir, "written-64k")
	before := fileHugeKiB(t)
	writeBlocks(t, big, 4*huge+4096, huge, 1)
	kept := fileHugeKiB(t)-before >= int64(4*huge>>10)
	writeBlocks(t, small, 4*huge+4096, 64<<10, 2)
	b, s := probeExe(big), probeExe(small)
	t.Logf("%s; %s; 2 MiB folios kept here: %v", b, s, kept)
	for _, e := range []exeCache{b, s} {
		if e.Err != "" || e.AlignedKiB != int64(4*huge>>10) || e.SizeKiB < e.AlignedKiB || e.HugeKiB < 0 || e.HugeKiB > e.AlignedKiB {
			t.Errorf("probe: %+v", e)
		}
	}
	if s.HugeKiB != 0 {
		t.Errorf("a file written in 64 KiB blocks: %d KiB in 2 MiB folios, want none", s.HugeKiB)
	}
	if kept && b.HugeKiB != b.AlignedKiB {
		t.Errorf("a file written in 2 MiB blocks: %d of %d KiB in 2 MiB folios, want all", b.HugeKiB, b.AlignedKiB)
	}
	if !kept {
		t.Logf("this kernel or file system kept no 2 MiB folios for %s: only the counts are checked", dir)
	} else if w := cacheWarning([]exeCache{{Path: "/a/prog", AlignedKiB: b.AlignedKiB, HugeKiB: b.HugeKiB}, {Path: "/b/prog", AlignedKiB: s.AlignedKiB, HugeKiB: s.HugeKiB}}); w == "" {
		t.Error("no warning for two builds held differently")
	}
	if e := probeExe(filepath.Join(dir, "missing")); e.Err == "" {
		t.Errorf("a missing file: %+v", e)
	}
}

func TestCacheWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		ex   []exeCache
		want string // in the warning; "" for none
	}{
		{"one build", []exeCache{{Path: "/a/hostfork", AlignedKiB: 18432, HugeKiB: 0}}, ""},
		{"alike", []exeCache{{Path: "/a/hostfork", AlignedKiB: 18432, HugeKiB: 18432}, {Path: "/b/hostfork", AlignedKiB: 18432, HugeKiB: 16384}}, ""},
		{"one in 2 MiB folios, one not", []exeCache{{Path: "/a/hostfork", AlignedKiB: 18432, HugeKiB: 18432}, {Path: "/b/hostfork", AlignedKiB: 18432}},
			"/a/hostfork (18.0 MiB) and /b/hostfork (0.0 MiB)"},
		{"different programs are not compared", []exeCache{{Path: "/usr/bin/bwrap", AlignedKiB: 0}, {Path: "/a/hostfork", AlignedKiB: 18432, HugeKiB: 18432}, {Path: "/a/hfbench", AlignedKiB: 4096}}, ""},
		{"unreadable ones are left out", []exeCache{{Path: "/a/hostfork", AlignedKiB: 18432, HugeKiB: 18432}, {Path: "/b/hostfork", Err: "permission denied"}}, ""},
	} {
		w := cacheWarning(tc.ex)
		if (w == "") != (tc.want == "") || !strings.Contains(w, tc.want) {
			t.Errorf("%s: warning %q, want one with %q", tc.name, w, tc.want)
		}
		if w != "" && !strings.Contains(w, "bs=2M") {
			t.Errorf("%s: the warning names no remedy: %q", tc.name, w)
		}
	}
}

func TestPmdMappedAt(t *testing.T) {
	smaps := `00400000-00401000 r--p 00000000 fe:00 123                                /usr/bin/x
Size:                  4 kB
FilePmdMapped:         0 kB
7f0000200000-7f0000600000 r--p 00000000 fe:00 456                        /tmp/a b
Size:               4096 kB
Rss:                4096 kB
FilePmdMapped:      4096 kB
THPeligible:           0
7f0000600000-7f0000800000 rw-p 00000000 00:00 0 
FilePmdMapped:         0 kB
`
	if n, ok := pmdMappedAt(smaps, 0x7f0000200000); !ok || n != 4096 {
		t.Errorf("the mapping at 0x7f0000200000: %d, %v; want 4096", n, ok)
	}
	if n, ok := pmdMappedAt(smaps, 0x400000); !ok || n != 0 {
		t.Errorf("the mapping at 0x400000: %d, %v; want 0", n, ok)
	}
	if _, ok := pmdMappedAt(smaps, 0x7f0000300000); ok {
		t.Error("an address no mapping starts at was found")
	}
}
