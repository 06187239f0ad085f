package cgroup

import "testing"

func TestParseEvents(t *testing.T) {
	e := parseEvents("populated 1\nfrozen 0\n")
	if !e.Populated || e.Frozen {
		t.Fatalf("%+v", e)
	}
	e = parseEvents("populated 0\nfrozen 1\n")
	if e.Populated || !e.Frozen {
		t.Fatalf("%+v", e)
	}
}
