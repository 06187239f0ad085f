package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// exeCache is how the page cache holds one executable of a benchmark:
// how much of the file lies in ranges the kernel could map with one 2 MiB
// entry each (2 MiB-aligned ranges, mapped at a 2 MiB-aligned address) and
// how much of that it did map so. A 2 MiB range is mapped with one entry
// only if the page cache holds it as one 2 MiB folio, which depends on how
// the file got into the cache (docs/decisions.md, entry 78), not on its
// contents: the same binary, copied or read back from disk, starts
// 0.2–0.4 ms slower on this project's VMs than written in 2 MiB blocks. So
// an A/B of two builds compares the page cache as much as the code unless
// both are held alike, and the report says when they are not.
type exeCache struct {
	Path       string `json:"path"`
	SizeKiB    int64  `json:"size_kib"`
	AlignedKiB int64  `json:"aligned_kib"` // in 2 MiB ranges that could be mapped with one entry
	HugeKiB    int64  `json:"huge_kib"`    // of those, mapped with one entry (held as 2 MiB folios)
	Err        string `json:"error,omitempty"`
}

func (e exeCache) String() string {
	if e.Err != "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Err)
	}
	return fmt.Sprintf("%s: %.1f of %.1f MiB", e.Path, float64(e.HugeKiB)/1024, float64(e.AlignedKiB)/1024)
}

// executables are the distinct programs the steps of cmds start, resolved
// as exec does, in order of first use.
func executables(cmds []*command) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cmds {
		for _, st := range c.steps {
			p, err := exec.LookPath(st[0])
			if err != nil {
				continue
			}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// probeExe maps the file at path read-only at an address congruent to its
// offsets modulo the PMD size, touches the first byte of every whole
// PMD-sized range (the kernel maps a range held as one folio of that size
// with one entry at the first touch of any of its pages) and reads back
// from smaps how much is so mapped. It reads what the benchmark left in
// the page cache; a range nothing ran from may be read in by the touch, in
// small folios, as it would be by the program. Run it after the samples.
func probeExe(path string) exeCache {
	e := exeCache{Path: path}
	huge := pmdSize()
	f, err := os.Open(path)
	if err != nil {
		e.Err = err.Error()
		return e
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		e.Err = err.Error()
		return e
	}
	size := int(st.Size())
	e.SizeKiB = int64(size) >> 10
	ranges := size / huge
	e.AlignedKiB = int64(ranges) * int64(huge>>10)
	if ranges == 0 {
		return e
	}
	// A reservation one range larger holds an aligned start.
	res, err := unix.Mmap(-1, 0, size+huge, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		e.Err = err.Error()
		return e
	}
	defer unix.Munmap(res)
	base := uintptr(unsafe.Pointer(&res[0]))
	aligned := (base + uintptr(huge) - 1) &^ (uintptr(huge) - 1)
	p, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(&res[aligned-base]), uintptr(size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		e.Err = err.Error()
		return e
	}
	m := unsafe.Slice((*byte)(p), size)
	for i := 0; i < ranges; i++ {
		touched += m[i*huge]
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		e.Err = err.Error()
		return e
	}
	kib, ok := pmdMappedAt(string(smaps), aligned)
	if !ok {
		e.Err = "its mapping is missing from /proc/self/smaps"
		return e
	}
	e.HugeKiB = kib
	return e
}

// touched keeps probeExe's reads: reads whose result is never used may be
// compiled away.
var touched byte

// pmdMappedAt is the FilePmdMapped figure of the mapping that starts at
// addr in an smaps text; ok is false when no mapping starts there.
func pmdMappedAt(smaps string, addr uintptr) (kib int64, ok bool) {
	kib = linux.FilePmdMappedKiB(smaps, func(m linux.Mapping) bool {
		ok = ok || m.Start == addr
		return m.Start == addr
	})
	return kib, ok
}

// pmdSize is the size of a PMD mapping (linux.PMDSize).
func pmdSize() int { return int(linux.PMDSize()) }

// cacheWarning names the executables whose page cache differs from the
// others' of the same program name: two builds of hostfork, say, one held
// in 2 MiB folios and one not. "" when there is nothing to compare.
func cacheWarning(ex []exeCache) string {
	byName := map[string][]exeCache{}
	var names []string
	for _, e := range ex {
		if e.Err != "" || e.AlignedKiB == 0 {
			continue
		}
		n := e.Path[strings.LastIndexByte(e.Path, '/')+1:]
		if byName[n] == nil {
			names = append(names, n)
		}
		byName[n] = append(byName[n], e)
	}
	var diff []string
	for _, n := range names {
		g := byName[n]
		for _, e := range g[1:] {
			// Up to a quarter of the file apart passes (the writable data,
			// say, which the page cache may hold differently to no
			// effect); more is warned about.
			limit := max(e.AlignedKiB, g[0].AlignedKiB) / 4
			if d := e.HugeKiB - g[0].HugeKiB; d > limit || -d > limit {
				diff = append(diff, fmt.Sprintf("%s (%.1f MiB) and %s (%.1f MiB)", g[0].Path, float64(g[0].HugeKiB)/1024, e.Path, float64(e.HugeKiB)/1024))
			}
		}
	}
	if len(diff) == 0 {
		return ""
	}
	return "WARNING: the page cache holds these builds differently, so the comparison measures it as well as the code: " +
		strings.Join(diff, "; ") + ". Rewrite each in 2 MiB blocks (dd if=EXE of=EXE.2m bs=2M && chmod --reference=EXE EXE.2m && mv EXE.2m EXE) and run again."
}
