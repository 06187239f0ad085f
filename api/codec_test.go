package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/jsonfast/jsonfasttest"
)

func randomEnv(f *jsonfasttest.Filler) Env {
	var e Env
	f.Fill(reflect.ValueOf(&e).Elem())
	if f.IntN(3) > 0 {
		e.Commands = nil // most records have none; keep the decoder's fast path busy
	}
	return e
}

func TestEnvAndCommandEncodeAsEncodingJSON(t *testing.T) {
	f := jsonfasttest.New(1, 2)
	for i := range 3000 {
		e := randomEnv(f)
		jsonfasttest.SameEncoding(t, fmt.Sprintf("env %d", i), &e, (*envNoCodec)(&e))
		jsonfasttest.SameEncoding(t, fmt.Sprintf("env %d by value", i), e, envNoCodec(e))
		var c Command
		f.Fill(reflect.ValueOf(&c).Elem())
		jsonfasttest.SameEncoding(t, fmt.Sprintf("command %d", i), &c, (*commandNoCodec)(&c))
		// MarshalJSON itself writes the unescaped form.
		direct, derr := e.MarshalJSON()
		var wb bytes.Buffer
		enc := json.NewEncoder(&wb)
		enc.SetEscapeHTML(false)
		if werr := enc.Encode((*envNoCodec)(&e)); werr == nil && (derr != nil || string(direct)+"\n" != wb.String()) {
			t.Fatalf("value %d: MarshalJSON wrote %s (%v), want %s", i, direct, derr, wb.Bytes())
		}
	}
}

// decodeBoth decodes doc with the hand-written decoder and with
// encoding/json and fails if they disagree.
func decodeBoth(t *testing.T, doc []byte) (fast Env, err error) {
	t.Helper()
	var plain envNoCodec
	perr := json.Unmarshal(doc, &plain)
	err = json.Unmarshal(doc, &fast)
	if (perr == nil) != (err == nil) {
		t.Fatalf("%s: encoding/json says %v, the decoder %v", doc, perr, err)
	}
	if !reflect.DeepEqual(Env(plain), fast) {
		t.Fatalf("%s: decoded\n%#v\nwant\n%#v", doc, fast, Env(plain))
	}
	return fast, err
}

func TestEnvDecodesAsEncodingJSON(t *testing.T) {
	f := jsonfasttest.New(3, 4)
	fast, encoded := 0, 0
	for range 3000 {
		e := randomEnv(f)
		doc, err := json.Marshal((*envNoCodec)(&e))
		if err != nil {
			continue
		}
		encoded++
		decodeBoth(t, doc)
		var n Env
		if decodeEnv(doc, &n) {
			fast++
		}
	}
	// The canonical documents must take the fast path, or the test above
	// only compared encoding/json with itself.
	if fast != encoded || encoded < 1000 {
		t.Fatalf("%d of %d documents were decoded without encoding/json", fast, encoded)
	}
}

// envOddities are documents the fast path must hand to encoding/json, or
// decode as it does.
var envOddities = []string{
	`null`, `{}`, ` {"id" : "x" , "rev" : 3 } `, `{"ID":"x"}`, `{"id":"x","id":"y"}`, `{"labels":{"a":"1"},"labels":{"b":"2"}}`,
	`{"owner":{"pid":1},"owner":{"boot_id":"b"}}`, `{"rev":1.5}`, `{"rev":"1"}`, `{"rev":1e3}`, `{"cgroup_inode":-1}`,
	`{"ttl":null}`, `{"ttl":5}`, `{"ttl":"5x"}`, `{"spec":null,"view":{"a" : 1}}`, `{"trees":[null]}`, `{"trees":[{"NAME":"a"}]}`,
	`{"labels":{"a":null}}`, `{"labels":null,"trees":null,"owner":null,"abandoned":null}`, `{"created_at":"nope"}`,
	`{"created_at":null,"activated_at":null}`, `{"id":"a\u00e9\n"}`, `{"id":"\xff"}`, `{"unknown":{"deep":[1,2]},"id":"x"}`,
	`{"st\u0061te":"active"}`, `{"commands":[{"id":"c","argv":["a"]}]}`, `{"commands":[1]}`, `[]`, `"x"`, `{"id":1}`,
	`{"expired":1}`, `{"auto_stop":null}`, `{"kelvin":"K"}`, `{"Kind":1}`, `{"owner":{"pid":"1"}}`, `{"trees":{}}`,
	`{"abandoned":["a",null]}`, `{"abandoned":"a"}`, `{"owner":[]}`,
}

func TestEnvDecodesOdditiesAsEncodingJSON(t *testing.T) {
	for _, doc := range envOddities {
		decodeBoth(t, []byte(doc))
	}
	// A target that is not empty merges as encoding/json merges.
	doc := []byte(`{"labels":{"b":"2"},"owner":{"pid":7}}`)
	fast := Env{Labels: map[string]string{"a": "1"}, Owner: &Identity{BootID: "boot"}}
	plain := envNoCodec{Labels: map[string]string{"a": "1"}, Owner: &Identity{BootID: "boot"}}
	if err := json.Unmarshal(doc, &fast); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc, &plain); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(Env(plain), fast) {
		t.Fatalf("merge: %#v, want %#v", fast, Env(plain))
	}
}

func FuzzEnvUnmarshal(f *testing.F) {
	for _, doc := range envOddities {
		f.Add([]byte(doc))
	}
	fl := jsonfasttest.New(5, 6)
	for range 20 {
		e := randomEnv(fl)
		if doc, err := json.Marshal((*envNoCodec)(&e)); err == nil {
			f.Add(doc)
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		decodeBoth(t, doc)
	})
}
