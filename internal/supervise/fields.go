package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The guardian (C) writes its receipt and events as key=value fields, never
// JSON: the keys are the JSON names of Receipt's and Event's fields, a
// value is percent-encoded where a byte is a space, a control character,
// DEL or '%' ("%0A"), numbers are decimal and times are nanoseconds since
// the Unix epoch. An event is one line ("ev=KIND"); a
// receipt has one field a line and ends with "end=<hash>", the FNV-1a
// (32-bit, hex) of every byte before it, so that a read torn by a rewrite
// is told from a whole one. parseFields is the one reader of both.

// errTorn: a receipt whose end line is missing or does not match its text.
var errTorn = errors.New("the receipt's end line does not match its text")

// ParseReceipt parses the text of a receipt file (its padding included).
func ParseReceipt(b []byte) (*Receipt, error) {
	b = bytes.TrimRight(b, " \n\x00")
	if len(b) == 0 {
		return nil, ErrNoReceipt
	}
	i := bytes.LastIndex(b, []byte("end="))
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return nil, errTorn
	}
	h := fnv.New32a()
	h.Write(b[:i])
	if string(b[i+4:]) != fmt.Sprintf("%08x", h.Sum32()) {
		return nil, errTorn
	}
	var r Receipt
	if err := parseFields(b[:i], &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// parseEvent parses one event line.
func parseEvent(line []byte) (Event, error) {
	var ev Event
	err := parseFields(line, &ev)
	if err == nil && ev.Kind == "" {
		err = errors.New("an event without its kind")
	}
	return ev, err
}

// parseFields sets the fields of the struct that into points to from b's
// key=value fields (separated by spaces or newlines), by their JSON names.
// Unknown keys are skipped; a malformed field or value is an error.
func parseFields(b []byte, into any) error {
	v := reflect.ValueOf(into).Elem()
	byName := map[string]int{}
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		byName[name] = i
	}
	for _, f := range bytes.FieldsFunc(b, func(r rune) bool { return r == ' ' || r == '\n' }) {
		key, raw, ok := strings.Cut(string(f), "=")
		if !ok {
			return fmt.Errorf("guardian field %.40q has no '='", f)
		}
		val, err := url.PathUnescape(raw)
		if err != nil {
			return fmt.Errorf("guardian field %s: %w", key, err)
		}
		i, ok := byName[key]
		if !ok {
			continue
		}
		if err := setField(v.Field(i), val); err != nil {
			return fmt.Errorf("guardian field %s=%.40q: %w", key, val, err)
		}
	}
	return nil
}

var timeType = reflect.TypeOf(time.Time{})

func setField(f reflect.Value, val string) error {
	if f.Kind() == reflect.Pointer {
		p := reflect.New(f.Type().Elem())
		if err := setField(p.Elem(), val); err != nil {
			return err
		}
		f.Set(p)
		return nil
	}
	if f.Type() == timeType {
		ns, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(time.Unix(0, ns).UTC()))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(val)
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(val, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return err
		}
		f.SetUint(n)
	default:
		return fmt.Errorf("no reader for %s", f.Type())
	}
	return nil
}
