package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
	rel, err := filepath.Rel(m.Path, v2)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	mounts, err := v1Mounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(mp, rel), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup v1 group %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// v1Mounts lists the mount points of the cgroup v1 hierarchies, from
// /proc/self/mountinfo (none on a host with cgroup2 alone).
func v1Mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && len(fields) > 4 {
				if fields[i+1] == "cgroup" {
					out = append(out, fields[4])
				}
				break
			}
		}
	}
	return out, sc.Err()
}
