package linux

import (
	"bytes"
	"os"
	"strconv"
)

// Pressure is /proc/pressure/NAME's "some avg10": the share of the last
// ten seconds (percent) in which at least one task waited for the
// resource (cpu, memory, io), or nil where the kernel has no PSI.
func Pressure(name string) *float64 {
	b, err := os.ReadFile("/proc/pressure/" + name)
	if err != nil {
		return nil
	}
	return someAvg10(b)
}

func someAvg10(b []byte) *float64 {
	for _, line := range bytes.Split(b, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("some "))
		if !ok {
			continue
		}
		for _, f := range bytes.Fields(rest) {
			if v, ok := bytes.CutPrefix(f, []byte("avg10=")); ok {
				if n, err := strconv.ParseFloat(string(v), 64); err == nil {
					return &n
				}
			}
		}
	}
	return nil
}
