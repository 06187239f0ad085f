// Package jsonfasttest fills records with random values for the tests
// that compare jsonfast's codecs with encoding/json.
package jsonfasttest

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

var floats = []float64{0, 1, 1.5, -2, 0.25, 1e-7, 3e-300, 1e21, 123456.789, 1e20, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(-1)}

// Filler makes random records that reach every branch of the codecs: nil,
// empty and full slices, maps and pointers; strings with escapes, HTML
// characters, line separators and invalid UTF-8; raw JSON with spaces;
// times in other zones and out of JSON's range.
type Filler struct{ r *rand.Rand }

// New returns a Filler seeded with the two numbers.
func New(seed1, seed2 uint64) *Filler { return &Filler{rand.New(rand.NewPCG(seed1, seed2))} }

// IntN is a random number in [0, n).
func (f *Filler) IntN(n int) int { return f.r.IntN(n) }

var stringPieces = []string{
	"", "a", "hello world", `"`, `\`, "<b>&amp;</b>", "\u2028", "\u2029", "\x00", "\x1f", "\x7f",
	"\b\f\n\r\t", "é", "日本", "\xff", "\xe2\x80", "😀", "/", "\u00a0", "ﬀ",
}

var rawPieces = []string{
	`{}`, `[]`, `null`, `1`, `"x"`, `{"a": [1, 2, {"b": "<&>"}]}`, ` { "k" : "v\u2028" } `, `[true,false,null]`,
	`{"memory":"1G","cpus":1.5,"allow_weaker":true}`,
}

// String is a random string made of pieces that need escaping.
func (f *Filler) String() string {
	var b strings.Builder
	for n := f.r.IntN(4); n > 0; n-- {
		b.WriteString(stringPieces[f.r.IntN(len(stringPieces))])
	}
	return b.String()
}

// Time is a random time, sometimes zero, in another zone or past year 9999.
func (f *Filler) Time() time.Time {
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

// Fill sets v, and every exported field below it, to random values.
func (f *Filler) Fill(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(f.Time()))
		return
	case reflect.TypeFor[json.RawMessage]():
		if f.r.IntN(3) > 0 {
			v.Set(reflect.ValueOf(json.RawMessage(rawPieces[f.r.IntN(len(rawPieces))])))
		}
		return
	case reflect.TypeFor[time.Duration]():
		v.SetInt(f.r.Int64N(int64(100 * time.Hour)))
		return
	}
	if v.Kind() == reflect.Int64 && v.Type().Name() == "Duration" { // api.Duration, spec.Duration
		v.SetInt(f.r.Int64N(int64(100 * time.Hour)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.String())
	case reflect.Float64:
		v.SetFloat(floats[f.r.IntN(len(floats))])
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
			f.Fill(p.Elem())
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
				f.Fill(s.Index(i))
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
				f.Fill(k)
				e := reflect.New(v.Type().Elem()).Elem()
				f.Fill(e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				f.Fill(v.Field(i))
			}
		}
	}
}

// SameEncoding fails t unless v (through its own MarshalJSON) and plain
// (the same value as a type without it) encode alike, both through
// json.Marshal and through an Encoder that does not escape HTML.
func SameEncoding(t testing.TB, label string, v, plain any) {
	t.Helper()
	want, werr := json.Marshal(plain)
	got, gerr := json.Marshal(v)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("%s: Marshal differs\n got %s (%v)\nwant %s (%v)", label, got, gerr, want, werr)
	}
	var wb, gb bytes.Buffer
	we, ge := json.NewEncoder(&wb), json.NewEncoder(&gb)
	we.SetEscapeHTML(false)
	ge.SetEscapeHTML(false)
	werr, gerr = we.Encode(plain), ge.Encode(v)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(gb.Bytes(), wb.Bytes()) {
		t.Fatalf("%s: Encoder without HTML escaping differs\n got %s (%v)\nwant %s (%v)", label, gb.Bytes(), gerr, wb.Bytes(), werr)
	}
}
