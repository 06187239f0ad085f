package cli

import "testing"

// The detach filter holds back what could begin the sequence, sends it
// once it can't, and finds the sequence after a repeated first key.
func TestDetachFilter(t *testing.T) {
	pq, _ := parseDetachKeys("ctrl-p,ctrl-q")
	for _, tc := range []struct {
		keys  []byte
		in    []string // successive reads
		out   string   // everything sent
		reads int      // the read that detaches (1-based; 0: none)
	}{
		{pq, []string{"ab\x10\x11cd"}, "ab", 1},
		{pq, []string{"ab\x10", "\x11"}, "ab", 2},
		{pq, []string{"\x10\x10\x11"}, "\x10", 1}, // ctrl-p twice, then ctrl-q
		{pq, []string{"\x10", "\x10", "\x11"}, "\x10", 3},
		{pq, []string{"\x10x\x11"}, "\x10x\x11", 0},
		{pq, []string{"\x10", "x"}, "\x10x", 0},
		{[]byte("aab"), []string{"aaab"}, "a", 1},
		{[]byte("abac"), []string{"ababac"}, "ab", 1},
		{nil, []string{"\x10\x11"}, "\x10\x11", 0},
	} {
		f := detachFilter{keys: tc.keys}
		var sent []byte
		hitAt := 0
		for i, r := range tc.in {
			out, hit := f.feed([]byte(r))
			sent = append(sent, out...)
			if hit {
				hitAt = i + 1
				break
			}
		}
		if string(sent) != tc.out || hitAt != tc.reads {
			t.Errorf("keys %q, input %q: sent %q, detached at read %d; want %q at %d", tc.keys, tc.in, sent, hitAt, tc.out, tc.reads)
		}
	}
}
