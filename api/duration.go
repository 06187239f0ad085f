package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("20m",
// "1h30m0s", "2s") in JSON and spec files. It also reads a "d" (24h) unit.
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText accepts a duration string (see ParseDuration).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON accepts a duration string; a bare number is refused with a
// message that says how to write one.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) != nil {
		return fmt.Errorf("a duration is a string such as \"20m\" or \"2s\", not %s: %w", string(b), ErrInvalid)
	}
	return d.UnmarshalText([]byte(s))
}

// ParseDuration is time.ParseDuration that also accepts a leading "d"
// (24h) unit, as in "7d" or "1d12h", and refuses negative values.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration: %w", ErrInvalid)
	}
	var total time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		days := 0
		for _, c := range s[:i] {
			if c < '0' || c > '9' || days > 100000 {
				return 0, fmt.Errorf("bad duration %q (use e.g. 30s, 20m, 2h, 7d): %w", s, ErrInvalid)
			}
			days = days*10 + int(c-'0')
		}
		if days > 100000 {
			return 0, fmt.Errorf("duration %q is too long (at most 100000d): %w", s, ErrInvalid)
		}
		total = time.Duration(days) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return total, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (use e.g. 30s, 20m, 2h, 7d): %w", s, ErrInvalid)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative duration %q: %w", s, ErrInvalid)
	}
	if total+v < total {
		return 0, fmt.Errorf("duration %q is too long: %w", s, ErrInvalid)
	}
	return total + v, nil
}
