package api

import (
	"fmt"
	"time"
)

// DeadlineRequest says where to move an environment's deadline (Env.Extend,
// POST /v1/envs/{id}/deadline, hostfork extend): TTL from now, or Until,
// exactly one. Later or earlier are both moves; the store's lifetime.max
// bounds how late.
type DeadlineRequest struct {
	// TTL puts the deadline this long after now.
	TTL Duration `json:"ttl,omitempty"`
	// Until puts the deadline at this instant.
	Until *time.Time `json:"until,omitempty"`
}

// Validate checks that exactly one of TTL and Until is given.
func (r DeadlineRequest) Validate() error {
	switch {
	case r.TTL != 0 && r.Until != nil:
		return fmt.Errorf("give the new deadline once: a ttl from now (e.g. \"30m\") or an instant (until, RFC 3339), not both: %w", ErrInvalid)
	case r.TTL < 0:
		return fmt.Errorf("ttl %v is negative: give a positive duration from now (e.g. \"30m\"): %w", r.TTL.D(), ErrInvalid)
	case r.TTL == 0 && r.Until == nil:
		return fmt.Errorf("give the new deadline: a ttl from now (e.g. \"30m\") or an instant (until, RFC 3339): %w", ErrInvalid)
	}
	return nil
}

// At is the deadline r asks for, given the time now.
func (r DeadlineRequest) At(now time.Time) time.Time {
	if r.Until != nil {
		return *r.Until
	}
	return now.Add(r.TTL.D())
}
