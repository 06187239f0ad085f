package view

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// MountEntry is one line of /proc/PID/mountinfo.
type MountEntry struct {
	Target  string
	FSType  string
	Source  string
	Options string // per-mount options
}

// ReadMountinfo parses /proc/self/mountinfo.
func ReadMountinfo() ([]MountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []MountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseMountinfoLine(sc.Text()); ok {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

func parseMountinfoLine(line string) (MountEntry, bool) {
	f := strings.Fields(line)
	sep := -1
	for i, s := range f {
		if s == "-" {
			sep = i
			break
		}
	}
	if sep < 6 || sep+2 >= len(f) {
		return MountEntry{}, false
	}
	return MountEntry{Target: unescape(f[4]), Options: f[5], FSType: f[sep+1], Source: unescape(f[sep+2])}, true
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
