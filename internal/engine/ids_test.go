package engine

import (
	"strings"
	"testing"
)

func TestNewID(t *testing.T) {
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	seen := map[string]bool{}
	counts := map[rune]int{}
	const n = 4000
	for i := 0; i < n; i++ {
		id := newID()
		if len(id) != 10 || strings.Trim(id, alphabet) != "" {
			t.Fatalf("newID() = %q: want 10 characters of %s", id, alphabet)
		}
		if seen[id] {
			t.Fatalf("newID() repeated %q within %d ids (50 random bits each)", id, i)
		}
		seen[id] = true
		for _, c := range id {
			counts[c]++
		}
	}
	// 40,000 characters over 32 symbols: 1,250 each on average. A stuck
	// or biased source (all zero bytes give "0000000000") shows as a
	// symbol far outside the bounds; a uniform one stays within them with
	// overwhelming probability (±8 standard deviations of about 35).
	for _, c := range alphabet {
		if k := counts[c]; k < 950 || k > 1550 {
			t.Errorf("symbol %q appeared %d times in %d ids: not uniform", c, k, n)
		}
	}
}
