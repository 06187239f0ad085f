package linux

import "testing"

func TestSomeAvg10(t *testing.T) {
	got := someAvg10([]byte("some avg10=22.16 avg60=14.43 avg300=21.95 total=13525320929\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	if got == nil || *got != 22.16 {
		t.Errorf("got %v, want 22.16", got)
	}
	if got := someAvg10([]byte("full avg10=1.00\n")); got != nil {
		t.Errorf("no some line: got %v, want nil", *got)
	}
}

// TestPressure reads this kernel's PSI, where it has it.
func TestPressure(t *testing.T) {
	for _, n := range []string{"cpu", "memory"} {
		p := Pressure(n)
		if p != nil && (*p < 0 || *p > 100) {
			t.Errorf("%s pressure %v: not a percentage", n, *p)
		}
	}
}
