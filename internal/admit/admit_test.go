package admit

import (
	"errors"
	"strings"
	"testing"
)

const gib = uint64(1) << 30

func mem(n uint64) *uint64 { return &n }

func stable(b uint64) *Sample   { return &Sample{Bytes: b, Complete: true, Stable: true} }
func unstable(b uint64) *Sample { return &Sample{Bytes: b, Complete: true} }
func partial(b uint64) *Sample  { return &Sample{Bytes: b, Stable: true} } // as a caller might build it

func live(samples ...*Sample) []Workload {
	var ws []Workload
	for i, s := range samples {
		ws = append(ws, Workload{ID: string(rune('a' + i)), Sample: s})
	}
	return ws
}

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       Input
		slots    int
		free     int
		bound    string
		reserved uint64
		reasons  []string
		memSlots int // -1: nil
	}{
		{
			name:  "idle 16-core host with plenty of memory: cores bound",
			in:    Input{Host: Host{Cores: 16, MemAvailable: mem(64 * gib)}},
			slots: 11, free: 11, bound: BoundCores, memSlots: 22,
		},
		{
			name:  "two cores: floor(0.7*2)=1",
			in:    Input{Host: Host{Cores: 2, MemAvailable: mem(24 * gib)}},
			slots: 1, free: 1, bound: BoundCores, memSlots: 8,
		},
		{
			name:  "one core still has one slot",
			in:    Input{Host: Host{Cores: 1, MemAvailable: mem(24 * gib)}},
			slots: 1, free: 1, bound: BoundCores, memSlots: 8,
		},
		{
			name:  "unknown cores count as one slot",
			in:    Input{Host: Host{MemAvailable: mem(24 * gib)}},
			slots: 1, free: 1, bound: BoundCores, memSlots: 8,
		},
		{
			name:  "memory bound: 0.7*6 GiB = 4.2 GiB holds two 2 GiB floors",
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(6 * gib)}},
			slots: 2, free: 2, bound: BoundMemory, memSlots: 2,
		},
		{
			name:  "too little memory for one floor: still one slot",
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(1 * gib)}},
			slots: 1, free: 1, bound: BoundMinimum, memSlots: 0,
		},
		{
			name:  "no memory telemetry: exactly one slot, even on a big host",
			in:    Input{Host: Host{Cores: 64}},
			slots: 1, free: 1, bound: BoundTelemetry, memSlots: -1,
		},
		{
			name:  "no memory telemetry with one workload running: no free slot",
			in:    Input{Host: Host{Cores: 64}, Live: live(stable(100 << 20))},
			slots: 1, free: 0, bound: BoundTelemetry, memSlots: -1,
			reserved: 2 * gib, reasons: []string{ReasonFloor},
		},
		{
			name: "a complete stable 5 GiB tree reserves 5 GiB, and its usage is added back",
			// budget 0.7*(10+5)=10.5 GiB; reserved 5; fresh (5.5)/2 = 2; mem slots 3
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(10 * gib)}, Live: live(stable(5 * gib))},
			slots: 3, free: 2, bound: BoundMemory, memSlots: 3,
			reserved: 5 * gib, reasons: []string{ReasonObserved},
		},
		{
			name: "an incomplete 5 GiB sample keeps the floor and is not added back",
			// budget 0.7*10=7; reserved 2; fresh 5/2=2; mem 3
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(10 * gib)}, Live: live(partial(5 * gib))},
			slots: 3, free: 2, bound: BoundMemory, memSlots: 3,
			reserved: 2 * gib, reasons: []string{ReasonIncomplete},
		},
		{
			name: "an unstable sample keeps the floor and is not added back",
			// budget 0.7*10=7; reserved 2; fresh 5/2=2; mem 3
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(10 * gib)}, Live: live(unstable(5 * gib))},
			slots: 3, free: 2, bound: BoundMemory, memSlots: 3,
			reserved: 2 * gib, reasons: []string{ReasonUnstable},
		},
		{
			name:  "never sampled: the floor",
			in:    Input{Host: Host{Cores: 4, MemAvailable: mem(100 * gib)}, Live: live(nil)},
			slots: 2, free: 1, bound: BoundCores, memSlots: 35,
			reserved: 2 * gib, reasons: []string{ReasonNoSample},
		},
		{
			name: "overcommitted host: running work continues, nothing free",
			// budget 0.7*(1+3*0.5)=1.75 GiB < reserved 6 GiB
			in:    Input{Host: Host{Cores: 32, MemAvailable: mem(1 * gib)}, Live: live(stable(gib/2), stable(gib/2), stable(gib/2))},
			slots: 3, free: 0, bound: BoundMemory, memSlots: 3,
			reserved: 6 * gib, reasons: []string{ReasonFloor, ReasonFloor, ReasonFloor},
		},
		{
			name:  "share 1.0 uses all cores",
			in:    Input{Host: Host{Cores: 8, MemAvailable: mem(100 * gib)}, Share: 1},
			slots: 8, free: 8, bound: BoundCores, memSlots: 50,
		},
		{
			name:  "share 0.1 of 4 cores still has one slot",
			in:    Input{Host: Host{Cores: 4, MemAvailable: mem(100 * gib)}, Share: 0.1},
			slots: 1, free: 1, bound: BoundCores, memSlots: 5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if c.Slots != tc.slots || c.Free != tc.free || c.Bound != tc.bound || c.Reserved != tc.reserved {
				t.Errorf("slots %d free %d bound %s reserved %d; want %d %d %s %d (%+v)",
					c.Slots, c.Free, c.Bound, c.Reserved, tc.slots, tc.free, tc.bound, tc.reserved, c)
			}
			if tc.memSlots < 0 && c.MemorySlots != nil {
				t.Errorf("memory slots %d without telemetry", *c.MemorySlots)
			}
			if tc.memSlots >= 0 && (c.MemorySlots == nil || *c.MemorySlots != tc.memSlots) {
				t.Errorf("memory slots %v, want %d", c.MemorySlots, tc.memSlots)
			}
			if c.Slots < 1 {
				t.Error("fewer than one slot")
			}
			if c.Used != len(tc.in.Live) || len(c.Reservations) != len(tc.in.Live) {
				t.Errorf("used %d, reservations %d, live %d", c.Used, len(c.Reservations), len(tc.in.Live))
			}
			for i, r := range c.Reservations {
				if r.Bytes < FloorBytes {
					t.Errorf("reservation %d below the floor: %d", i, r.Bytes)
				}
				if i < len(tc.reasons) && r.Reason != tc.reasons[i] {
					t.Errorf("reservation %d reason %q, want %q", i, r.Reason, tc.reasons[i])
				}
			}
		})
	}
}

func TestComputeRejectsBadShare(t *testing.T) {
	for _, s := range []float64{-0.1, 1.5} {
		if _, err := Compute(Input{Share: s, Host: Host{Cores: 4}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("share %v: %v", s, err)
		}
	}
	c, err := Compute(Input{Host: Host{Cores: 10, MemAvailable: mem(100 * gib)}})
	if err != nil || c.Share != DefaultShare || c.Slots != 7 {
		t.Errorf("default share: %+v %v", c, err)
	}
}

func TestDecide(t *testing.T) {
	open := Capacity{Slots: 2, Used: 1, Free: 1, Bound: BoundCores}
	full := Capacity{Slots: 2, Used: 2, Free: 0, Bound: BoundMemory}
	for _, tc := range []struct {
		c       Capacity
		mode    Mode
		paused  bool
		want    Verdict
		because string
	}{
		{open, Wait, false, Admit, "slot 2 of 2"},
		{open, Fail, false, Admit, "slot"},
		{full, Wait, false, Defer, "memory"},
		{full, Fail, false, Refuse, "all 2 slots"},
		{open, Wait, true, Defer, "paused"},
		{open, Fail, true, Refuse, "paused"},
		{full, Skip, true, Admit, "skipped"},
		{full, Skip, false, Admit, "skipped"},
	} {
		d := Decide(tc.c, tc.mode, tc.paused)
		if d.Verdict != tc.want || !strings.Contains(d.Reason, tc.because) {
			t.Errorf("%s paused=%v free=%d: %+v, want %s (%q)", tc.mode, tc.paused, tc.c.Free, d, tc.want, tc.because)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Wait, "wait": Wait, "fail": Fail, "skip": Skip} {
		if m, err := ParseMode(in); err != nil || m != want {
			t.Errorf("%q: %v %v", in, m, err)
		}
	}
	if _, err := ParseMode("later"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad mode: %v", err)
	}
}
