package planner

import "testing"

func TestV1LimitParent(t *testing.T) {
	for _, c := range []struct{ mount, v2, want string }{
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/hostfork", "hostfork"},
		{"/sys/fs/cgroup", "/sys/fs/cgroup/hostfork", "hostfork"},
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/hostfork-test-1a2b", "hostfork-test-1a2b"},
		{"/sys/fs/cgroup", "/sys/fs/cgroup/user.slice/user-1000.slice/hostfork", "user.slice/user-1000.slice/hostfork"},
		{"/sys/fs/cgroup/unified", "", V1LimitParent},
		{"", "/sys/fs/cgroup/unified/hostfork-x", V1LimitParent},
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified", V1LimitParent},
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/other", V1LimitParent},
	} {
		if got := v1LimitParent(c.mount, c.v2); got != c.want {
			t.Errorf("v1LimitParent(%q, %q) = %q, want %q", c.mount, c.v2, got, c.want)
		}
	}
}
