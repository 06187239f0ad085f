package view

import (
	"strings"

	"github.com/moby/sys/mountinfo"
)

// MountEntry is one line of /proc/PID/mountinfo.
type MountEntry struct {
	Target  string
	FSType  string
	Source  string
	Options string // per-mount options
	// Shared: the mount has shared propagation (a "shared:N" optional
	// field).
	Shared bool
}

// ReadMountinfo reads this process's mount table.
func ReadMountinfo() ([]MountEntry, error) {
	ms, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	out := make([]MountEntry, 0, len(ms))
	for _, m := range ms {
		out = append(out, MountEntry{Target: m.Mountpoint, FSType: m.FSType, Source: m.Source, Options: m.Options,
			Shared: strings.Contains(m.Optional, "shared:")})
	}
	return out, nil
}
