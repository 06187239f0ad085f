package linux

import "testing"

func TestMemAvailable(t *testing.T) {
	if got := memAvailable([]byte("MemTotal: 100 kB\nMemAvailable:   24349796 kB\n")); got == nil || *got != 24349796*1024 {
		t.Errorf("got %v", got)
	}
	if got := memAvailable([]byte("MemTotal: 100 kB\nMemFree: 5 kB\n")); got != nil {
		t.Errorf("old kernel without MemAvailable: got %d, want unknown", *got)
	}
	if got := memAvailable([]byte("MemAvailable: x kB\n")); got != nil {
		t.Errorf("garbage: got %d", *got)
	}
}

// The host facts admission computes from (internal/engine, Capacity).
func TestHostFacts(t *testing.T) {
	cores, mem := AllowedCPUs(), MemAvailable()
	if cores < 1 {
		t.Errorf("cores %d", cores)
	}
	if mem == nil || *mem == 0 {
		t.Fatalf("no MemAvailable on a Linux host")
	}
	t.Logf("host: %d cores, %d MiB available", cores, *mem>>20)
}
