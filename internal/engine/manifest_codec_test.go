package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
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
