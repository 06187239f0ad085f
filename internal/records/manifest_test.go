package records

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// TestWriteJSONAtomic: a record is written as json.MarshalIndent writes
// it, HTML characters and U+2028 escaped; an existing file is replaced,
// what can't be encoded leaves it as it was, and no temporary file is
// left, also when the directory is missing.
func TestWriteJSONAtomic(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "manifest.json")
	check := func(what string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 5, time.UTC)
	c := &api.Command{ID: "c1", Env: "e1", CreatedAt: now, Argv: []string{"sh", "-c", "a && b < c > d \u2028"}, Timeout: api.Duration(2 * time.Second)}
	m := Manifest{Env: &api.Env{ID: "e1", CreatedAt: now, Spec: json.RawMessage(`{ "purpose" : "<x>" }`)}, Commands: []*api.Command{c, nil}}
	for _, v := range []any{m, c, map[string]any{"x": []int{}, "y": "<&>"}} {
		want, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		WriteJSON(dst, v)
		check("written", append(want, '\n'))
	}
	if got, _ := os.ReadFile(dst); !bytes.Contains(got, []byte(`"\u003c\u0026\u003e"`)) {
		t.Fatalf("HTML characters are not escaped: %s", got)
	}
	before, _ := os.ReadFile(dst)
	WriteJSON(dst, Manifest{Env: &api.Env{Spec: json.RawMessage(`{`)}})
	check("a record that can't be encoded", before)

	WriteJSON(filepath.Join(dir, "missing", "manifest.json"), m)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "manifest.json" || strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left in the directory: %s", e.Name())
		}
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("manifest.json: %v %v, want mode 0600", st.Mode(), err)
	}
}
