package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// ProbeCapabilities finds what ownership tiers this host offers under
// the cgroup parent parent ("" means $HOSTFORK_CGROUP_PARENT, else the
// default for this user), making the parent if needed.
func ProbeCapabilities(parent string) api.Capabilities {
	var c api.Capabilities
	m, err := cgroup.FindMount()
	if err != nil {
		c.Cgroup2Reason = err.Error()
		return c
	}
	c.CgroupMount = m.Path
	c.Hybrid = m.Hybrid
	if parent == "" {
		parent = os.Getenv("HOSTFORK_CGROUP_PARENT")
	}
	if parent == "" {
		if os.Geteuid() != 0 {
			self := cgroup.SelfPath()
			d, ok := cgroup.DelegatedSubtree(m.Path, self, os.Geteuid())
			if !ok {
				c.Cgroup2Reason = "no delegated cgroup2 subtree for this user: this process's cgroup " + self + " is not inside a directory this user owns (ask the administrator to delegate one — chown it to you, or use a systemd user session with Delegate=yes — and run from inside it, or set HOSTFORK_CGROUP_PARENT)"
				return c
			}
			parent = filepath.Join(d, "hostfork")
		} else {
			parent = filepath.Join(m.Path, "hostfork")
		}
	}
	if !strings.HasPrefix(filepath.Clean(parent)+"/", filepath.Clean(m.Path)+"/") {
		c.Cgroup2Reason = fmt.Sprintf("cgroup parent %s is not under the cgroup2 mount %s", parent, m.Path)
		return c
	}
	if err := cgroup.EnsureParent(parent); err != nil {
		c.Cgroup2Reason = err.Error()
		return c
	}
	if !linux.Writable(parent) {
		c.Cgroup2Reason = fmt.Sprintf("cgroup parent %s is not writable by this user", parent)
		return c
	}
	c.Cgroup2 = true
	c.CgroupParent = parent
	return c
}
