package spec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/jsonfast/jsonfasttest"
)

type environmentNoCodec Environment

func TestEnvironmentEncodesAsEncodingJSON(t *testing.T) {
	f := jsonfasttest.New(7, 8)
	for i := range 3000 {
		var e Environment
		f.Fill(reflect.ValueOf(&e).Elem())
		want, werr := json.Marshal((*environmentNoCodec)(&e))
		got, gerr := json.Marshal(&e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("request %d: Marshal differs\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
		var wb, gb bytes.Buffer
		we, ge := json.NewEncoder(&wb), json.NewEncoder(&gb)
		we.SetEscapeHTML(false)
		ge.SetEscapeHTML(false)
		werr, gerr = we.Encode((*environmentNoCodec)(&e)), ge.Encode(e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(gb.Bytes(), wb.Bytes()) {
			t.Fatalf("request %d: Encoder differs\n got %s (%v)\nwant %s (%v)", i, gb.Bytes(), gerr, wb.Bytes(), werr)
		}
	}
}
