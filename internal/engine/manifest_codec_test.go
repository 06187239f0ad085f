package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/jsonfast/jsonfasttest"
)

type manifestNoCodec Manifest

func TestManifestEncodesAsEncodingJSON(t *testing.T) {
	f := jsonfasttest.New(11, 12)
	for i := range 500 {
		var m Manifest
		if f.IntN(4) > 0 {
			m.Env = new(api.Env)
			f.Fill(reflect.ValueOf(m.Env).Elem())
		}
		switch f.IntN(3) {
		case 0:
		case 1:
			m.Commands = []*api.Command{}
		default:
			for n := 1 + f.IntN(3); n > 0; n-- {
				var c *api.Command
				if f.IntN(5) > 0 {
					c = new(api.Command)
					f.Fill(reflect.ValueOf(c).Elem())
				}
				m.Commands = append(m.Commands, c)
			}
		}
		want, werr := json.MarshalIndent(manifestNoCodec(m), "", "  ")
		got, gerr := json.MarshalIndent(m, "", "  ")
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("manifest %d differs\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
	}
}

type commandNoCodec api.Command

// TestWriteJSONAtomic: the manifest and a command's record are written
// with the bytes json.MarshalIndent gives for them through reflection
// (the indentation of jsonfast.AppendIndent and the records' own codecs),
// other values through json.MarshalIndent; an existing file is replaced,
// and no temporary file is left, also when the directory is missing.
func TestWriteJSONAtomic(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "manifest.json")
	f := jsonfasttest.New(13, 14)
	check := func(what string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	written := 0
	for i := range 200 {
		var m Manifest
		m.Env = new(api.Env)
		f.Fill(reflect.ValueOf(m.Env).Elem())
		c := new(api.Command)
		f.Fill(reflect.ValueOf(c).Elem())
		c.Argv = append(c.Argv, "a && b < c > d \u2028")
		m.Commands = []*api.Command{c, nil}
		write := func(what string, v, noCodec any) {
			t.Helper()
			before, _ := os.ReadFile(dst)
			want, err := json.MarshalIndent(noCodec, "", "  ")
			writeJSONAtomic(dst, v)
			if err != nil {
				// What can't be encoded is not written.
				check(what+" that can't be encoded ("+err.Error()+")", bytes.TrimSuffix(before, []byte("\n")))
				return
			}
			check(fmt.Sprintf("%s %d", what, i), want)
			written++
		}
		write("manifest", m, manifestNoCodec(m))
		write("command", c, (*commandNoCodec)(c))
	}
	if written < 50 {
		t.Fatalf("only %d of 400 records could be encoded: the comparison proves little", written)
	}
	other := map[string]any{"x": []int{}, "y": "<&>"}
	want, _ := json.MarshalIndent(other, "", "  ")
	writeJSONAtomic(dst, other)
	check("a map", want)

	writeJSONAtomic(filepath.Join(dir, "missing", "manifest.json"), other)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "manifest.json" || strings.HasPrefix(e.Name(), ".record-") {
			t.Errorf("left in the directory: %s", e.Name())
		}
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("manifest.json: %v %v, want mode 0600", st.Mode(), err)
	}
}
