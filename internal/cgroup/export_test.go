package cgroup

// RemoveKnown exposes Remove's fast path (no listing) to the tests.
func RemoveKnown(g *Group, known ...string) bool { return g.removeKnown(known) }
