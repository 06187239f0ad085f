package jsonfast

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

var stringSeeds = []string{
	"", "a", `"`, `\`, "<b>&</b>", "\u2028\u2029", "\x00\x1f\x7f", "\b\f\n\r\t", "é日本😀", "\xff", "\xe2\x80", "\xed\xa0\x80",
}

// encodingJSONString is encoding/json's encoding of s without HTML escaping.
func encodingJSONString(t *testing.T, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString(nil, s), encodingJSONString(t, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

func FuzzDecodeString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add([]byte(`"` + s + `"`))
		f.Add(encodingJSONString(&testing.T{}, s))
	}
	f.Add([]byte(`"\ud83d\ude00 \u00e9 \/"`))
	f.Fuzz(func(t *testing.T, v []byte) {
		// Any bytes, valid or not (Duration.UnmarshalJSON may be called
		// directly); trimmed, as EachMember hands a value over.
		v = bytes.TrimSpace(v)
		var want, got string
		werr := json.Unmarshal(v, &want)
		ok := DecodeString(v, &got)
		if (werr == nil) != ok || got != want {
			t.Fatalf("DecodeString(%s) = %q, %v; encoding/json %q, %v", v, got, ok, want, werr)
		}
	})
}

func TestEachMemberAndElement(t *testing.T) {
	doc := []byte(" { \"a\" : [ 1 , {\"x\":\"]}\\\"\"} , \"s\\\"\" ] ,\n\"b\\u00e9\":null,\"c\":{\"d\":[]}, \"e\": -1.5e3 } ")
	var keys []string
	var vals []string
	if !EachMember(bytes.TrimSpace(doc), func(k string, v []byte) bool {
		keys, vals = append(keys, k), append(vals, string(v))
		return true
	}) {
		t.Fatal("EachMember refused a valid object")
	}
	wantKeys := []string{"a", "bé", "c", "e"}
	wantVals := []string{`[ 1 , {"x":"]}\""} , "s\"" ]`, `null`, `{"d":[]}`, `-1.5e3`}
	if !reflect.DeepEqual(keys, wantKeys) || !reflect.DeepEqual(vals, wantVals) {
		t.Fatalf("members %q %q, want %q %q", keys, vals, wantKeys, wantVals)
	}
	var elems []string
	EachElement([]byte(vals[0]), func(v []byte) bool { elems = append(elems, string(v)); return true })
	if want := []string{"1", `{"x":"]}\""}`, `"s\""`}; !reflect.DeepEqual(elems, want) {
		t.Fatalf("elements %q, want %q", elems, want)
	}
	for _, d := range []string{`[]`, `"x"`, `1`, `null`} {
		if EachMember([]byte(d), func(string, []byte) bool { return true }) {
			t.Errorf("EachMember took %s as an object", d)
		}
	}
}

func TestFieldsSendOddKeysToEncodingJSON(t *testing.T) {
	set := Fields{Names: []string{"id", "state"}}
	if i, ok := set.Field("state"); i != 1 || !ok {
		t.Fatalf("state: %d %v", i, ok)
	}
	if _, ok := set.Field("state"); ok {
		t.Fatal("a repeated key was taken")
	}
	if _, ok := set.Field("ID"); ok {
		t.Fatal("a key in another case was taken")
	}
	if _, ok := set.Field("\u212a"); ok {
		t.Fatal("a non-ASCII unknown key was taken")
	}
	if i, ok := set.Field("other"); i != -1 || !ok {
		t.Fatalf("an unknown key: %d %v", i, ok)
	}
}

func TestWriterMatchesEncodingJSON(t *testing.T) {
	n, yes := 7, true
	at := time.Date(2026, 12, 2, 19, 0, 0, 123, time.FixedZone("X", 3600))
	type shape struct {
		S  string            `json:"s"`
		SO string            `json:"so,omitempty"`
		I  int64             `json:"i"`
		U  uint64            `json:"u,omitempty"`
		B  bool              `json:"b"`
		IP *int              `json:"ip"`
		BP *bool             `json:"bp"`
		T  time.Time         `json:"t"`
		TP *time.Time        `json:"tp"`
		R  json.RawMessage   `json:"r,omitempty"`
		L  []string          `json:"l"`
		LO []string          `json:"lo,omitempty"`
		M  map[string]string `json:"m"`
	}
	v := shape{S: "x<y", I: -3, U: 9, B: true, IP: &n, BP: &yes, T: at, R: json.RawMessage(` { "a" : [1, 2] } `),
		L: []string{"a", "\u2028"}, M: map[string]string{"z": "1", "a": "2"}}
	var w Writer
	w.Begin('{')
	w.Str("s", v.S)
	w.StrOmit("so", v.SO)
	w.Int("i", v.I)
	w.UintOmit("u", v.U)
	w.Bool("b", v.B)
	w.IntPtr("ip", v.IP)
	w.BoolPtr("bp", v.BP)
	w.Time("t", v.T)
	w.TimePtr("tp", v.TP)
	w.RawOmit("r", v.R)
	w.Strings("l", v.L)
	w.StringsOmit("lo", v.LO)
	w.StringMap("m", v.M)
	w.End('}')
	got, err := w.Result()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if want := bytes.TrimSuffix(b.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
		t.Fatalf("wrote %s, want %s", got, want)
	}
	var bad Writer
	bad.Time("t", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	if _, err := bad.Result(); err == nil {
		t.Fatal("a year past 9999 was written")
	}
}

var indentSeeds = []string{
	`{}`, `[]`, `{"a":{}}`, `{"a":[]}`, `[[],{},[{}]]`, `null`, `"x"`, `1.5e3`, `true`,
	`{"a":1,"b":[1,2,{"c":"d"}],"e":{"f":null}}`,
	`{"s":"<b>&</b> \"q\" \\ \u2028\u2029 \u003c"}`,
	" { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ",
	`{"k\"e:y,":"v[a]{l}"}`,
	"{\"raw\":\"\xe2\x80\xa8\xe2\x80\xa9\"}",
}

// FuzzAppendIndent: for any valid JSON document, AppendIndent gives what
// json.MarshalIndent gives for it as a RawMessage (compacted, HTML
// escaped, indented by two spaces).
func FuzzAppendIndent(f *testing.F) {
	for _, s := range indentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			return
		}
		want, err := json.MarshalIndent(json.RawMessage(src), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendIndent([]byte("pre"), src); !bytes.Equal(got[3:], want) || string(got[:3]) != "pre" {
			t.Errorf("AppendIndent(%q) =\n%s\nwant\n%s", src, got, want)
		}
	})
}
