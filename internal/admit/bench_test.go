package admit

import (
	"fmt"
	"testing"
)

const benchLive = 100

// BenchmarkDecide is the pure decision alone: Compute and Decide over 100
// live workloads, from synthetic samples. What sampling those workloads
// costs is measured beside the sampler (internal/tree, BenchmarkAdmit*).
func BenchmarkDecide(b *testing.B) {
	in := Input{Host: Host{Cores: 64, MemAvailable: mem(512 * gib)}}
	for i := range benchLive {
		in.Live = append(in.Live, Workload{ID: fmt.Sprint(i), Sample: stable(uint64(i) << 26)})
	}
	for b.Loop() {
		c, err := Compute(in)
		if err != nil {
			b.Fatal(err)
		}
		_ = Decide(c, Wait, false)
	}
}
