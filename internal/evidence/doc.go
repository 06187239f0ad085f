// Package evidence says what can be known about a command now, for the
// pure decide.Command: its guardian's receipt (registered by inode), the
// kernel's word on its guardian, leader and cgroup, its OOM counter; and
// whom a tree stop may treat as the tree's root (Target, GuardianProven,
// WorkloadProven); and a record's reader-computed fields (Compute).
// Nothing is cached: each call re-reads the evidence.
//
// The engine imports it; it writes nothing.
package evidence
