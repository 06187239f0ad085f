package spec

import (
	"errors"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"2s": 2 * time.Second, "1d": 24 * time.Hour, "1d2h": 26 * time.Hour, "0s": 0} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1s", "x", "1dd", "d", "-1d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"2s", "1d", "7d12h", "-3m", "1e9s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("%q gave negative %v", s, d)
		}
	})
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		e    Environment
		ok   bool
	}{
		{"defaults", Environment{}, true},
		{"detach needs expiry", Environment{Lifetime: Lifetime{OwnerExit: "detach"}}, false},
		{"detach with ttl", Environment{Lifetime: Lifetime{OwnerExit: "detach", MaxRuntime: Duration(time.Minute)}}, true},
		{"ttl and until", Environment{Lifetime: Lifetime{UntilStopped: true, MaxRuntime: Duration(time.Minute)}}, false},
		{"ttl under grace", Environment{Lifetime: Lifetime{MaxRuntime: Duration(time.Second)}}, false},
		{"bad owner", Environment{Lifetime: Lifetime{OwnerExit: "x"}}, false},
		{"bad label", Environment{Labels: map[string]string{"a b": "x"}}, false},
		{"bad tier", Environment{Tier: "v1"}, false},
	}
	for _, c := range cases {
		err := c.e.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: not ErrInvalid: %v", c.name, err)
		}
	}
}
