package linux

import (
	"bytes"
	"os"
	"strconv"
)

// MemAvailable is /proc/meminfo's MemAvailable in bytes, or nil when it
// can't be read (a kernel before 3.14 lacks the line).
func MemAvailable() *uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil
	}
	return memAvailable(b)
}

// memAvailable parses MemAvailable (kB) from /proc/meminfo content.
func memAvailable(meminfo []byte) *uint64 {
	for _, line := range bytes.Split(meminfo, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return nil
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return nil
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			n *= 1024
		}
		return &n
	}
	return nil
}
