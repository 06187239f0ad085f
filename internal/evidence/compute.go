package evidence

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Compute fills a command's reader-computed fields (liveness, whether
// this user can stop it, the leader's PID, the deadline: the
// environment's, or the command's timeout if sooner) and gives its
// lists and maps their empty values.
func Compute(c *api.Command, envDeadline *time.Time) {
	c.Liveness = decide.LivenessOf(c)
	c.Stoppable = c.Liveness != api.Exited && CanStop(c)
	c.PID = nil
	if c.Workload != nil && c.Liveness == api.Alive && c.LeaderState == api.PhaseLive {
		pid := c.Workload.PID
		c.PID = &pid
	}
	c.DeadlineAt = nil
	if envDeadline != nil {
		t := *envDeadline
		c.DeadlineAt = &t
	}
	if c.Timeout > 0 && c.StartedAt != nil {
		t := c.StartedAt.Add(c.Timeout.D())
		if c.DeadlineAt == nil || t.Before(*c.DeadlineAt) {
			c.DeadlineAt = &t
		}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if c.CleanupErrors == nil {
		c.CleanupErrors = []string{}
	}
	if c.EnvKeys == nil {
		c.EnvKeys = []string{}
	}
	if c.Argv == nil {
		c.Argv = []string{}
	}
}

// CanStop reports whether this user can stop the tree: root, or the owner
// of its cgroup (cgroup2 tier) or of its guardian (subreaper tier).
func CanStop(c *api.Command) bool {
	if os.Geteuid() == 0 {
		return true
	}
	if c.CgroupPath != "" {
		return linux.Writable(filepath.Join(c.CgroupPath, "cgroup.kill"))
	}
	if c.Guardian == nil {
		return false
	}
	fi, err := os.Stat("/proc/" + strconv.Itoa(c.Guardian.PID))
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
