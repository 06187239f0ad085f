package api

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"2s": 2 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, " 20m ": 20 * time.Minute, "0s": 0} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1s", "d", "1x", "1d-2h", "5"} {
		if _, err := ParseDuration(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"2s", "7d", "1d12h", "-1s", "", "1e9h", "9999999d", "1.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: error %v is not ErrInvalid", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative duration %v accepted", s, d)
		}
		// What is written is read back as the same value.
		b, _ := Duration(d).MarshalText()
		var back Duration
		if err := back.UnmarshalText(b); err != nil || back.D() != d {
			t.Fatalf("%q → %v → %s → %v, %v", s, d, b, back, err)
		}
	})
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"a=b", "a=b,c", "=x", "a==b", ",,", "k=v=w", " a = b "} {
		f.Add(s, "a", "b")
	}
	f.Fuzz(func(t *testing.T, s, _, v string) {
		sel, err := ParseSelector(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: error %v is not ErrInvalid", s, err)
			}
			return
		}
		if err := sel.Validate(); err != nil {
			t.Fatalf("%q parsed to %q, which does not validate: %v", s, sel, err)
		}
		for _, term := range sel {
			if strings.Contains(term, ",") || strings.TrimSpace(term) != term || term == "" {
				t.Fatalf("%q: bad term %q", s, term)
			}
		}
		// A selector's own labels satisfy it.
		// A selector whose key=value terms don't contradict each other
		// matches the labels they name.
		labels := map[string]string{}
		consistent := true
		for _, term := range sel {
			key, val, hasValue := strings.Cut(term, "=")
			if old, ok := labels[key]; ok && hasValue && old != val {
				consistent = false
			}
			if hasValue {
				labels[key] = val
			} else if _, ok := labels[key]; !ok {
				labels[key] = v
			}
		}
		if consistent && !sel.Matches(labels) {
			t.Fatalf("%q does not match its own labels %v", sel, labels)
		}
		if sel.Matches(map[string]string{}) && len(sel) > 0 {
			t.Fatalf("%q matches no labels at all", sel)
		}
	})
}
