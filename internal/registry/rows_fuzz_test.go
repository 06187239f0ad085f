package registry

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzPlainStrings: the decoder's fast path for argv columns agrees with
// encoding/json wherever it answers, and answers for what encoding/json
// writes of plain strings.
func FuzzPlainStrings(f *testing.F) {
	for _, s := range []string{`["true"]`, `["sh","-c","exit 3"]`, `[]`, `[""]`, `["a",""]`, `["a\"b"]`, `["<x>"]`, `["é"]`, `["a" ,"b"]`, `["a"]x`, `["a",]`, `[,]`, `[`, `["a`, `"a"`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := plainStrings(s)
		var want []string
		err := json.Unmarshal([]byte(s), &want)
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Fatalf("plainStrings(%q) = %q; encoding/json: %q, %v", s, got, want, err)
		}
		// What the encoder writes of a plain argv takes the fast path.
		var argv []string
		for i := 0; i < len(s); i += 7 {
			part := s[i:min(i+7, len(s))]
			plain := true
			for j := 0; j < len(part); j++ {
				if c := part[j]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
					plain = false
				}
			}
			if plain {
				argv = append(argv, part)
			}
		}
		if len(argv) == 0 {
			return
		}
		b, _ := json.Marshal(argv)
		if got, ok := plainStrings(string(b)); !ok || !reflect.DeepEqual(got, argv) {
			t.Fatalf("plainStrings(%s) = %q, %v; want %q", b, got, ok, argv)
		}
	})
}
