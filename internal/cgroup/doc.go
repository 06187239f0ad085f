// Package cgroup manages hostfork's cgroup v2 groups: finding a writable
// cgroup2 mount (including /sys/fs/cgroup/unified on hybrid hosts), creating
// groups exclusively, cloning processes into them, and the kernel's tree
// operations: cgroup.kill, cgroup.freeze and the populated/frozen states of
// cgroup.events. It holds no policy about what a group is for; the supervise
// package decides that. Only Linux code imports it.
package cgroup
