package admit

import (
	"cmp"
	"errors"
	"fmt"
	"math"

	"github.com/habemus-papadum/hostfork/api"
)

// Defaults from the design.
const (
	// DefaultShare is the share of logical cores and of available memory
	// admission may spend; the rest is left to work hostfork doesn't own.
	DefaultShare = 0.70
	// FloorBytes is the least memory reserved for each workload tree.
	FloorBytes uint64 = 2 << 30
)

var (
	// ErrInvalid: a share or mode is malformed.
	ErrInvalid = errors.New("invalid admission input")
)

// Host is a sample of the host's capacity.
type Host struct {
	// Cores is the number of logical cores this process may run on.
	Cores int `json:"cores"`
	// MemAvailable is /proc/meminfo's MemAvailable in bytes; nil when the
	// host has no memory telemetry.
	MemAvailable *uint64 `json:"mem_available,omitempty"`
}

// Sample is one workload tree's memory, read twice (internal/tree's
// Sampler takes it).
type Sample = api.Sample

// Workload is one admitted, live workload: an agent root with all its
// descendants, and the latest sample of the tree's memory.
type Workload struct {
	ID string `json:"id"`
	// Sample is nil when the tree could not be sampled at all.
	Sample *Sample `json:"sample,omitempty"`
}

// Input is everything a capacity computation needs.
type Input struct {
	Host Host `json:"host"`
	// Share of cores and of available memory to spend, in (0, 1]; zero
	// means DefaultShare.
	Share float64    `json:"share"`
	Live  []Workload `json:"live"`
}

// Why a workload reserves what it does.
const (
	ReasonObserved   = "observed"   // a complete, stable sample above the floor
	ReasonFloor      = "floor"      // a complete, stable sample at or below the floor
	ReasonIncomplete = "incomplete" // some tree member could not be read: the floor
	ReasonUnstable   = "unstable"   // two readings disagreed: the floor
	ReasonNoSample   = "no-sample"  // never sampled: the floor
)

// Reservation is what one live workload holds.
type Reservation = api.Reservation

// What bounds the capacity.
const (
	BoundCores     = "cores"
	BoundMemory    = "memory"
	BoundMinimum   = "minimum" // both caps were below one slot: one slot anyway
	BoundTelemetry = "no-memory-telemetry"
)

// Capacity is the outcome of Compute.
type Capacity = api.Capacity

// reserve applies the floor rule to one workload: only a complete, stable
// sample may raise the reservation above FloorBytes.
func reserve(w Workload) Reservation {
	r := Reservation{ID: w.ID, Bytes: FloorBytes, Sample: w.Sample}
	s := w.Sample
	switch {
	case s == nil:
		r.Reason = ReasonNoSample
	case !s.Complete:
		r.Reason = ReasonIncomplete
	case !s.Stable:
		r.Reason = ReasonUnstable
	case s.Bytes > FloorBytes:
		r.Bytes, r.Reason = s.Bytes, ReasonObserved
	default:
		r.Reason = ReasonFloor
	}
	return r
}

// Compute applies the admission rules:
//
//   - cores: floor(share × cores) slots, at least 1;
//   - memory: every live workload reserves max(2 GiB, observed), where only
//     a complete, stable sample counts as observed; new workloads get the
//     2 GiB floor from what is left of share × available memory. The
//     workloads' own complete, stable usage is added back to MemAvailable,
//     since it is already missing from it and is counted in their
//     reservations;
//   - no host memory telemetry: exactly one slot;
//   - always at least one slot.
//
// Used counts live workloads; Free is never negative (a host that shrank
// under its running work has zero free slots, and running work continues).
func Compute(in Input) (Capacity, error) {
	share := cmp.Or(in.Share, DefaultShare)
	if math.IsNaN(share) || share <= 0 || share > 1 {
		return Capacity{}, fmt.Errorf("%w: share %v must be in (0, 1]", ErrInvalid, in.Share)
	}
	c := Capacity{
		Cores:        in.Host.Cores,
		MemAvailable: in.Host.MemAvailable,
		Share:        share,
		Used:         len(in.Live),
		Reservations: make([]Reservation, 0, len(in.Live)),
	}
	c.CoreSlots = max(1, int(math.Floor(share*float64(in.Host.Cores)+1e-9)))

	var addBack uint64
	for _, w := range in.Live {
		r := reserve(w)
		c.Reserved += r.Bytes
		c.Reservations = append(c.Reservations, r)
		// Only a complete, stable reading is known to be held now; an
		// unstable one may be a spike already gone.
		if s := w.Sample; s != nil && s.Complete && s.Stable {
			addBack += s.Bytes
		}
	}

	if in.Host.MemAvailable == nil {
		c.Slots, c.Bound = 1, BoundTelemetry
	} else {
		budget := uint64(share * float64(*in.Host.MemAvailable+addBack))
		c.MemoryBudget = &budget
		var fresh uint64
		if budget > c.Reserved {
			fresh = (budget - c.Reserved) / FloorBytes
		}
		mem := int(min(fresh, math.MaxInt32)) + len(in.Live)
		c.MemorySlots = &mem
		c.Slots, c.Bound = c.CoreSlots, BoundCores
		if mem < c.Slots {
			c.Slots, c.Bound = mem, BoundMemory
		}
		if c.Slots < 1 {
			c.Slots, c.Bound = 1, BoundMinimum
		}
	}
	c.Free = max(0, c.Slots-c.Used)
	return c, nil
}

// Mode is how a request treats a full host.
type Mode string

// Modes.
const (
	// Wait: queue until a slot is free and admission is not paused (the
	// default for agent workloads).
	Wait Mode = "wait"
	// Fail: refuse at once when there is no free slot or admission is
	// paused.
	Fail Mode = "fail"
	// Skip: don't take part in admission: start now, don't count as a
	// live workload, and don't wait for the pause gate (it gates
	// admission, and the tools stay available).
	Skip Mode = "skip"
)

// ParseMode parses a --admit value; "" is Wait.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return Wait, nil
	case Wait, Fail, Skip:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: admission mode %q (want wait, fail or skip)", ErrInvalid, s)
}

// Verdict is the outcome for one request.
type Verdict string

// Verdicts.
const (
	Admit  Verdict = "admit"
	Defer  Verdict = "wait"
	Refuse Verdict = "refuse"
)

// Decision is a verdict with the reason a user sees.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
}

// Decide decides one new request. Paused blocks new admission (waiting or
// refusing by mode); running work is not affected by it.
func Decide(c Capacity, mode Mode, paused bool) Decision {
	full := func(why string) Decision {
		if mode == Fail {
			return Decision{Refuse, why}
		}
		return Decision{Defer, why}
	}
	switch {
	case mode == Skip:
		return Decision{Admit, "admission skipped by request"}
	case paused:
		return full("admission is paused (hostfork resume releases it)")
	case c.Free > 0:
		return Decision{Admit, fmt.Sprintf("slot %d of %d", c.Used+1, c.Slots)}
	}
	return full(fmt.Sprintf("all %d slots in use (bound by %s)", c.Slots, c.Bound))
}
