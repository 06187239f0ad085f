package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// filler makes random records that reach every branch of the codecs: nil,
// empty and full slices, maps and pointers; strings with escapes, HTML
// characters, line separators and invalid UTF-8; raw JSON with spaces;
// times in other zones and out of JSON's range.
type filler struct{ r *rand.Rand }

var stringPieces = []string{
	"", "a", "hello world", `"`, `\`, "<b>&amp;</b>", "\u2028", "\u2029", "\x00", "\x1f", "\x7f",
	"\b\f\n\r\t", "é", "日本", "\xff", "\xe2\x80", "😀", "/", "\u00a0", "ﬀ",
}

var rawPieces = []string{
	`{}`, `[]`, `null`, `1`, `"x"`, `{"a": [1, 2, {"b": "<&>"}]}`, ` { "k" : "v\u2028" } `, `[true,false,null]`,
	`{"memory":"1G","cpus":1.5,"allow_weaker":true}`,
}

func (f *filler) string() string {
	var b strings.Builder
	for n := f.r.IntN(4); n > 0; n-- {
		b.WriteString(stringPieces[f.r.IntN(len(stringPieces))])
	}
	return b.String()
}

func (f *filler) time() time.Time {
	switch f.r.IntN(8) {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(10000+f.r.IntN(10), 1, 1, 0, 0, 0, 0, time.UTC) // Marshal refuses it
	case 2:
		return time.Unix(f.r.Int64N(1<<33), f.r.Int64N(1e9)).In(time.FixedZone("X", 3600*(f.r.IntN(25)-12)))
	}
	return time.Unix(f.r.Int64N(1<<33), f.r.Int64N(1e9)).UTC()
}

func (f *filler) fill(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(f.time()))
		return
	case reflect.TypeFor[json.RawMessage]():
		if f.r.IntN(3) > 0 {
			v.Set(reflect.ValueOf(json.RawMessage(rawPieces[f.r.IntN(len(rawPieces))])))
		}
		return
	case reflect.TypeFor[time.Duration](), reflect.TypeFor[Duration]():
		v.SetInt(f.r.Int64N(int64(100 * time.Hour)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.string())
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		if f.r.IntN(3) > 0 {
			v.SetInt(f.r.Int64() - f.r.Int64())
		}
	case reflect.Uint64:
		if f.r.IntN(3) > 0 {
			v.SetUint(f.r.Uint64())
		}
	case reflect.Pointer:
		if f.r.IntN(2) == 0 {
			p := reflect.New(v.Type().Elem())
			f.fill(p.Elem())
			v.Set(p)
		}
	case reflect.Slice:
		switch f.r.IntN(3) {
		case 0: // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + f.r.IntN(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				f.fill(s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Map:
		switch f.r.IntN(3) {
		case 0:
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
		default:
			m := reflect.MakeMap(v.Type())
			for n := 1 + f.r.IntN(4); n > 0; n-- {
				k := reflect.New(v.Type().Key()).Elem()
				f.fill(k)
				e := reflect.New(v.Type().Elem()).Elem()
				f.fill(e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	}
}

func randomEnv(f *filler) Env {
	var e Env
	f.fill(reflect.ValueOf(&e).Elem())
	if f.r.IntN(3) > 0 {
		e.Commands = nil // most records have none; keep the decoder's fast path busy
	}
	return e
}

// sameEncoding checks that v (with its MarshalJSON) and plain (the same
// value without it) encode alike through Marshal and through an Encoder
// that does not escape HTML.
func sameEncoding(t *testing.T, i int, v, plain any) {
	t.Helper()
	want, werr := json.Marshal(plain)
	got, gerr := json.Marshal(v)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("value %d: Marshal differs\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
	}
	var wb, gb bytes.Buffer
	we, ge := json.NewEncoder(&wb), json.NewEncoder(&gb)
	we.SetEscapeHTML(false)
	ge.SetEscapeHTML(false)
	werr, gerr = we.Encode(plain), ge.Encode(v)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(gb.Bytes(), wb.Bytes()) {
		t.Fatalf("value %d: Encoder without HTML escaping differs\n got %s (%v)\nwant %s (%v)", i, gb.Bytes(), gerr, wb.Bytes(), werr)
	}
}

func TestEnvAndCommandEncodeAsEncodingJSON(t *testing.T) {
	f := &filler{rand.New(rand.NewPCG(1, 2))}
	for i := range 3000 {
		e := randomEnv(f)
		sameEncoding(t, i, &e, (*envNoCodec)(&e))
		sameEncoding(t, i, e, envNoCodec(e))
		var c Command
		f.fill(reflect.ValueOf(&c).Elem())
		sameEncoding(t, i, &c, (*commandNoCodec)(&c))
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
	f := &filler{rand.New(rand.NewPCG(3, 4))}
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
	fl := &filler{rand.New(rand.NewPCG(5, 6))}
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
