// Package jsonfast encodes and decodes JSON without reflection, for the
// few records and messages every hostfork process reads or writes once:
// encoding/json builds a type's codec by reflection on its first use in a
// process, and a CLI call is one short process (docs/decisions.md, 63).
//
// Writer writes exactly what encoding/json writes for the same values
// with SetEscapeHTML(false). The decoders take the canonical documents
// encoding/json and hostfork's guardian write and report false for
// anything else; their callers then hand the whole document to
// encoding/json, so its semantics hold in every case.
package jsonfast

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Writer appends one JSON value. Members and elements are separated by
// what the buffer ends with: a ',' goes before each one unless the
// enclosing '{' or '[' (or a member's ':') was the last byte written.
type Writer struct {
	b   []byte
	err error
}

// Result is the value written, or the first error met.
func (w *Writer) Result() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

// Sep writes the comma before an array element (Key writes its own).
func (w *Writer) Sep() {
	if n := len(w.b); n > 0 {
		switch w.b[n-1] {
		case '{', '[', ':':
			return
		}
		w.b = append(w.b, ',')
	}
}

// Key starts a member.
func (w *Writer) Key(k string) {
	w.Sep()
	w.b = AppendString(w.b, k)
	w.b = append(w.b, ':')
}

// Str writes a string member.
func (w *Writer) Str(k, v string) { w.Key(k); w.b = AppendString(w.b, v) }

// StrOmit writes a string member unless it is empty (omitempty).
func (w *Writer) StrOmit(k, v string) {
	if v != "" {
		w.Str(k, v)
	}
}

// Int writes a number member.
func (w *Writer) Int(k string, v int64) { w.Key(k); w.b = strconv.AppendInt(w.b, v, 10) }

// UintOmit writes an unsigned member unless it is 0 (omitempty).
func (w *Writer) UintOmit(k string, v uint64) {
	if v != 0 {
		w.Key(k)
		w.b = strconv.AppendUint(w.b, v, 10)
	}
}

// Bool writes a boolean member.
func (w *Writer) Bool(k string, v bool) { w.Key(k); w.b = strconv.AppendBool(w.b, v) }

// IntPtr writes a number member, null for nil.
func (w *Writer) IntPtr(k string, v *int) {
	w.Key(k)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = strconv.AppendInt(w.b, int64(*v), 10)
}

// BoolPtr writes a boolean member, null for nil.
func (w *Writer) BoolPtr(k string, v *bool) {
	w.Key(k)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = strconv.AppendBool(w.b, *v)
}

// Time writes a time member as time.Time.MarshalJSON does.
func (w *Writer) Time(k string, t time.Time) {
	w.Key(k)
	w.TimeValue(t)
}

// TimeValue writes a time value (an element, or after Key).
func (w *Writer) TimeValue(t time.Time) {
	b, err := t.MarshalJSON()
	if err != nil {
		w.Fail(err)
		return
	}
	w.b = append(w.b, b...)
}

// TimePtr writes a time member, null for nil.
func (w *Writer) TimePtr(k string, t *time.Time) {
	w.Key(k)
	if t == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.TimeValue(*t)
}

// Duration writes a duration member as its String (api.Duration's MarshalText).
func (w *Writer) Duration(k string, d time.Duration) {
	w.Key(k)
	w.b = AppendString(w.b, d.String())
}

// rawOmit writes a RawMessage member unless it is empty: compacted, as
// encoding/json writes what a Marshaler returns.
func (w *Writer) RawOmit(k string, m json.RawMessage) {
	if len(m) == 0 {
		return
	}
	w.Key(k)
	var buf bytes.Buffer
	if err := json.Compact(&buf, m); err != nil {
		w.Fail(err)
		return
	}
	w.b = append(w.b, buf.Bytes()...)
}

// Fail records an error; Result returns the first.
func (w *Writer) Fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// Strings writes a string-array member, null for nil.
func (w *Writer) Strings(k string, l []string) {
	w.Key(k)
	if l == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = AppendStrings(w.b, l)
}

// AppendStrings appends l as a JSON array of strings ([] for nil).
func AppendStrings(dst []byte, l []string) []byte {
	dst = append(dst, '[')
	for i, s := range l {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, s)
	}
	return append(dst, ']')
}

// StringsOmit writes a string-array member unless it is empty (omitempty).
func (w *Writer) StringsOmit(k string, l []string) {
	if len(l) > 0 {
		w.Strings(k, l)
	}
}

// StringMap writes a map member with its keys sorted, null for nil.
func (w *Writer) StringMap(k string, m map[string]string) {
	w.Key(k)
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '{')
	for _, name := range SortedKeys(m) {
		w.Str(name, m[name])
	}
	w.b = append(w.b, '}')
}

// SortedKeys returns the map's keys in encoding/json's order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// AppendString is encoding/json's string encoding without HTML
// escaping: '"', '\\' and control bytes escaped (\b \f \n \r \t by name),
// invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// The decoder walks a document json.Valid has accepted, so it only needs
// to find where each value ends. Each decode function reports false for
// anything it does not take as encoding/json would, and the caller then
// decodes the whole document with encoding/json.

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the value that starts at i.
func valueEnd(d []byte, i int) int {
	switch d[i] {
	case '"':
		return stringEnd(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = stringEnd(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(d) {
		switch d[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at i.
func stringEnd(d []byte, i int) int {
	for i++; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// EachMember calls fn with each member of the object d, its key unquoted,
// and reports false if d is not an object or fn returned false.
func EachMember(d []byte, fn func(key string, val []byte) bool) bool {
	i := skipSpace(d, 0)
	if i >= len(d) || d[i] != '{' {
		return false
	}
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return true
	}
	for i < len(d) {
		end := stringEnd(d, i)
		var key string
		if !DecodeString(d[i:end], &key) {
			return false
		}
		i = skipSpace(d, end)
		i = skipSpace(d, i+1) // past ':'
		vend := valueEnd(d, i)
		if !fn(key, d[i:vend]) {
			return false
		}
		i = skipSpace(d, vend)
		if i >= len(d) || d[i] == '}' {
			return true
		}
		i = skipSpace(d, i+1) // past ','
	}
	return true
}

// EachElement calls fn with each element of the array d.
func EachElement(d []byte, fn func(val []byte) bool) bool {
	if len(d) == 0 || d[0] != '[' {
		return false
	}
	i := skipSpace(d, 1)
	if i < len(d) && d[i] == ']' {
		return true
	}
	for i < len(d) {
		vend := valueEnd(d, i)
		if !fn(d[i:vend]) {
			return false
		}
		i = skipSpace(d, vend)
		if i >= len(d) || d[i] == ']' {
			return true
		}
		i = skipSpace(d, i+1)
	}
	return true
}

// Fields tracks the keys a struct decode has seen: a repeated key (which
// encoding/json merges) sends the document to encoding/json, and so does a
// key that matches a field only without regard to case.
type Fields struct {
	Names []string // the struct's member names, at most 64
	seen  uint64
}

// field returns the index of key among the names, or -1 for a key
// encoding/json would ignore; ok is false when the decoder must give up.
func (m *Fields) Field(key string) (int, bool) {
	for i, n := range m.Names {
		if n == key {
			if m.seen&(1<<i) != 0 {
				return i, false
			}
			m.seen |= 1 << i
			return i, true
		}
	}
	for _, c := range []byte(key) {
		if c >= utf8.RuneSelf {
			return -1, false
		}
	}
	for _, n := range m.Names {
		if strings.EqualFold(n, key) {
			return -1, false
		}
	}
	return -1, true
}

// IsNull reports whether the value is the literal null.
func IsNull(v []byte) bool { return string(v) == "null" }

// DecodeString decodes a JSON string; null leaves s as it is.
func DecodeString(v []byte, s *string) bool {
	if IsNull(v) {
		return true
	}
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	if in := v[1 : len(v)-1]; v[len(v)-1] == '"' && plainString(in) {
		*s = string(in)
		return true
	}
	return json.Unmarshal(v, s) == nil
}

// plainString reports whether in is the inside of a JSON string that
// needs no unquoting: no escape, quote or control byte, valid UTF-8.
func plainString(in []byte) bool {
	for _, c := range in {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(in)
}

// DecodeInt decodes an integer; null leaves n as it is.
func DecodeInt(v []byte, n *int64) bool {
	if IsNull(v) {
		return true
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	*n = x
	return err == nil
}

// DecodeIntValue decodes an integer into an int; null leaves n as it is.
func DecodeIntValue(v []byte, n *int) bool {
	x := int64(*n)
	ok := DecodeInt(v, &x)
	*n = int(x)
	return ok
}

// DecodeUint decodes an unsigned integer; null leaves n as it is.
func DecodeUint(v []byte, n *uint64) bool {
	if IsNull(v) {
		return true
	}
	x, err := strconv.ParseUint(string(v), 10, 64)
	*n = x
	return err == nil
}

// DecodeBool decodes a boolean; null leaves b as it is.
func DecodeBool(v []byte, b *bool) bool {
	switch string(v) {
	case "null":
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return false
	}
	return true
}

// DecodeTime decodes a time as time.Time.UnmarshalJSON does.
func DecodeTime(v []byte, t *time.Time) bool { return t.UnmarshalJSON(v) == nil }

// DecodeTimePtr decodes a time into a new time.Time; null sets nil.
func DecodeTimePtr(v []byte, t **time.Time) bool {
	if IsNull(v) {
		*t = nil
		return true
	}
	*t = new(time.Time)
	return DecodeTime(v, *t)
}

// DecodeRaw keeps the value's bytes, null included, as RawMessage does.
func DecodeRaw(v []byte, m *json.RawMessage) bool {
	*m = append(json.RawMessage(nil), v...)
	return true
}

// DecodeStrings decodes an array of strings; null sets nil.
func DecodeStrings(v []byte, l *[]string) bool {
	if IsNull(v) {
		*l = nil
		return true
	}
	out := []string{}
	ok := EachElement(v, func(e []byte) bool {
		if IsNull(e) {
			return false
		}
		var s string
		if !DecodeString(e, &s) {
			return false
		}
		out = append(out, s)
		return true
	})
	*l = out
	return ok
}

// DecodeStringMap decodes an object of strings; null sets nil.
func DecodeStringMap(v []byte, m *map[string]string) bool {
	if IsNull(v) {
		*m = nil
		return true
	}
	out := map[string]string{}
	ok := EachMember(v, func(k string, e []byte) bool {
		if IsNull(e) {
			return false
		}
		var s string
		if !DecodeString(e, &s) {
			return false
		}
		out[k] = s
		return true
	})
	*m = out
	return ok
}

// Begin opens an object or array value ('{' or '[').
func (w *Writer) Begin(c byte) { w.b = append(w.b, c) }

// End closes it ('}' or ']').
func (w *Writer) End(c byte) { w.b = append(w.b, c) }

// Null writes null.
func (w *Writer) Null() { w.b = append(w.b, "null"...) }

// Uint writes a member with an unsigned number.
func (w *Writer) Uint(k string, v uint64) { w.Key(k); w.b = strconv.AppendUint(w.b, v, 10) }

// Bytes is what was written so far.
func (w *Writer) Bytes() []byte { return w.b }

// DecodeIntPtr decodes an integer into a new int; null sets nil.
func DecodeIntPtr(v []byte, p **int) bool {
	if IsNull(v) {
		*p = nil
		return true
	}
	var n int64
	if !DecodeInt(v, &n) {
		return false
	}
	x := int(n)
	*p = &x
	return true
}

// DecodeBoolPtr decodes a boolean into a new bool; null sets nil.
func DecodeBoolPtr(v []byte, p **bool) bool {
	if IsNull(v) {
		*p = nil
		return true
	}
	var b bool
	if !DecodeBool(v, &b) {
		return false
	}
	*p = &b
	return true
}

// Float writes a number member as encoding/json writes a float64: the
// shortest form, in exponent form below 1e-6 or from 1e21; NaN and the
// infinities are an error.
func (w *Writer) Float(k string, f float64) {
	w.Key(k)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		w.Fail(&json.UnsupportedValueError{Str: strconv.FormatFloat(f, 'g', -1, 64)})
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.b = strconv.AppendFloat(w.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 as e-9, as encoding/json writes it.
		if n := len(w.b); n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

// Value writes v through its own MarshalJSON (an element, or after Key):
// null for a nil pointer, as encoding/json writes it.
func (w *Writer) Value(v json.Marshaler) {
	if rv := reflect.ValueOf(v); v == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		w.Null()
		return
	}
	b, err := v.MarshalJSON()
	if err != nil {
		w.Fail(err)
		return
	}
	w.b = append(w.b, b...)
}

// AppendIndent appends src, a valid JSON document, indented as
// json.MarshalIndent(json.RawMessage(src), "", "  ") indents it: a
// member or element per line, two spaces a level, ": " after a key, {}
// and [] for empty ones, and in strings '<', '>', '&', U+2028 and U+2029
// escaped as encoding/json's Marshal escapes them. It does not validate
// src (encoding/json scans it twice to compact and indent it): give it
// what an encoder of this package made.
func AppendIndent(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	depth := 0
	needIndent := false // after '{' or '[': a value that follows starts a line
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, ' ', ' ')
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if needIndent && c != '}' && c != ']' {
			needIndent = false
			depth++
			newline()
		}
		switch c {
		case '"':
			dst = append(dst, c)
			for i++; i < len(src); i++ {
				c := src[i]
				switch {
				case c == '\\' && i+1 < len(src):
					dst = append(dst, c, src[i+1])
					i++
					continue
				case c == '<' || c == '>' || c == '&':
					dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
					continue
				case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
					dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
					i += 2
					continue
				}
				dst = append(dst, c)
				if c == '"' {
					break
				}
			}
		case '{', '[':
			needIndent = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, c, ' ')
		case '}', ']':
			if needIndent {
				needIndent = false
			} else {
				depth--
				newline()
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
