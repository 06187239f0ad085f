package linux

import (
	"reflect"
	"testing"
)

func TestIdentityMap(t *testing.T) {
	for _, c := range []struct {
		name string
		own  int
		sub  []IDRange
		want []IDMapLine
	}{
		{"own id alone", 1000, nil, []IDMapLine{{1000, 1000, 1}}},
		{"a range split around own", 1000, []IDRange{{100000, 65536}},
			[]IDMapLine{{1000, 1000, 1}, {0, 100000, 1000}, {1001, 101000, 64536}}},
		{"own above the ranges", 70000, []IDRange{{100000, 65536}},
			[]IDMapLine{{70000, 70000, 1}, {0, 100000, 65536}}},
		{"own 0 inside is itself", 0, []IDRange{{100000, 10}},
			[]IDMapLine{{0, 0, 1}, {1, 100000, 10}}},
		{"two ranges", 5, []IDRange{{100, 3}, {200, 4}},
			[]IDMapLine{{5, 5, 1}, {0, 100, 3}, {3, 200, 2}, {6, 202, 2}}},
	} {
		if got := IdentityMap(c.own, c.sub); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseSubID(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
		want IDRange
	}{
		{"alice:100000:65536", true, IDRange{100000, 65536}},
		{"1000:200000:10", true, IDRange{200000, 10}},
		{"bob:100000:65536", false, IDRange{}},
		{"alice:x:1", false, IDRange{}},
		{"alice:1:0", false, IDRange{}},
		{"alice:1", false, IDRange{}},
		{"", false, IDRange{}},
	} {
		got, ok := parseSubID(c.line, "alice", 1000)
		if ok != c.ok || got != c.want {
			t.Errorf("%q: got %v %v, want %v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}
