package node

import "testing"

func TestSlotDecision(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		paused                bool
		free, waiting, issued int
		ok, full              bool
	}{
		{"free", false, 2, 0, 0, true, false},
		{"last free slot", false, 2, 0, 1, true, false},
		{"pollers hold the free slots", false, 2, 0, 2, false, false},
		{"an environment waits for its command", false, 2, 1, 0, true, false},
		{"environments hold every slot", false, 2, 2, 0, false, true},
		{"no free slot", false, 0, 0, 0, false, true},
		{"paused", true, 2, 0, 0, false, true},
	} {
		ok, why, full := slotDecision(tt.paused, tt.free, tt.waiting, tt.issued)
		if ok != tt.ok || full != tt.full || (ok != (why == "")) {
			t.Errorf("%s: slotDecision = %v %q %v, want ok %v full %v", tt.name, ok, why, full, tt.ok, tt.full)
		}
	}
}
