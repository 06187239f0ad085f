package linux

import (
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps (or a mapping's header line in
// /proc/PID/smaps).
type Mapping struct {
	Start, End uintptr
	Perms      string
	Offset     uint64
	Path       string
}

// ParseMapsLine parses "start-end perms offset dev inode path"; ok is
// false for anything else (smaps' field lines, a malformed line).
func ParseMapsLine(line string) (m Mapping, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return m, false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	if !found {
		return m, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	off, err3 := strconv.ParseUint(f[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || e < s {
		return m, false
	}
	m = Mapping{Start: uintptr(s), End: uintptr(e), Perms: f[1], Offset: off}
	// The path is what follows the fifth field (the inode), and may hold
	// spaces.
	rest := line
	for i := 0; i < 5; i++ {
		rest = strings.TrimLeft(rest, " ")
		if j := strings.IndexByte(rest, ' '); j >= 0 {
			rest = rest[j:]
		} else {
			rest = ""
		}
	}
	// Only the separator: a file name may end in spaces.
	m.Path = strings.TrimLeft(rest, " ")
	return m, true
}

// FilePmdMappedKiB sums smaps' FilePmdMapped (file pages mapped with one
// PMD entry each, in KiB) over the mappings of an smaps text that in
// selects.
func FilePmdMappedKiB(smaps string, in func(Mapping) bool) int64 {
	var sum int64
	sel := false
	for _, line := range strings.Split(smaps, "\n") {
		if m, ok := ParseMapsLine(line); ok {
			sel = in(m)
			continue
		}
		if v, found := strings.CutPrefix(line, "FilePmdMapped:"); found && sel {
			if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
				sum += n
			}
		}
	}
	return sum
}

// PMDSize is the size of a PMD mapping: the kernel's hpage_pmd_size, else
// 2 MiB (x86-64, and arm64 with 4 KiB pages).
func PMDSize() uintptr {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n&(n-1) == 0 {
			return uintptr(n)
		}
	}
	return 2 << 20
}
