package testutil

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/moby/sys/mountinfo"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
)

// RemoveV1Mirrors removes the groups that mirror the cgroup2 parent v2 in
// each cgroup v1 hierarchy, with any empty groups left under them. The
// engine makes an environment's v1 limit groups under v2's path below the
// cgroup2 mount (docs/decisions.md, entry 70), so a test that gives the
// engine a parent of its own gets v1 parents of its own, to remove when it
// ends. Nothing is removed outside <v1 mount>/<v2's relative path>; a
// group that still holds tasks makes it fail.
func RemoveV1Mirrors(v2 string) error {
	m, err := cgroup.FindMount()
	if err != nil {
		return nil // no cgroup2: the engine mirrored nothing
	}
	rel, ok := cgroup.Below(m.Path, v2)
	if !ok {
		return nil
	}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return fmt.Errorf("listing the cgroup v1 hierarchies: %w", err)
	}
	var errs []error
	for _, mp := range mounts {
		if err := cgroup.Open(filepath.Join(mp.Mountpoint, rel)).Remove(); err != nil {
			errs = append(errs, fmt.Errorf("removing the cgroup v1 mirror of %s: %w", v2, err))
		}
	}
	return errors.Join(errs...)
}
