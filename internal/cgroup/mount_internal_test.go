package cgroup

import (
	"os"
	"testing"
)

// skip is testutil.Skip (which this package's internal tests can't import:
// testutil imports cgroup).
func skip(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("HOSTFORK_TEST_STRICT") == "1" {
		t.Fatalf("HOSTFORK_TEST_STRICT=1 and the test can't run: %s", reason)
	}
	t.Skip(reason)
}

// TestStatMountAgreesWithTable: the statfs shortcut finds the same mount
// point and layout as the mount table on this host.
func TestStatMountAgreesWithTable(t *testing.T) {
	table, err := scanMount()
	if err != nil {
		skip(t, "no cgroup2 mount: "+err.Error())
	}
	m, ok := statMount()
	if !ok {
		skip(t, "this host's cgroup layout is not one statMount recognizes (cgroup2 at "+table.Path+")")
	}
	if m.Path != table.Path || m.Hybrid != table.Hybrid {
		t.Fatalf("statMount %+v, the mount table %+v", m, table)
	}
}
