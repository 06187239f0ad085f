package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// clean makes text from records safe to print on a terminal: control
// characters (newline, CR, ESC, NUL, DEL, the C1 range) and invalid UTF-8
// are escaped Go-style (\n, \x1b, \u0085), so a purpose, an argv element or
// a label can neither fake rows nor send escape sequences. JSON output is
// already safe and is not cleaned.
func clean(s string) string {
	ok := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			ok = false
			break
		}
		i += n
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// errText is an error's message for one line of stderr: the parts that
// errors.Join put on lines of their own are joined with "; ", and the rest
// is cleaned.
func errText(err error) string {
	return clean(strings.ReplaceAll(err.Error(), "\n", "; "))
}

// cleanArgv joins argv for display, each element cleaned and quoted when
// it has spaces.
func cleanArgv(argv []string, max int) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		c := clean(a)
		if c == "" || strings.ContainsAny(c, " \t'\"") {
			c = strconv.Quote(a)
		}
		parts[i] = c
	}
	s := strings.Join(parts, " ")
	if max > 0 && len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}

// labelText writes labels sorted by key, cleaned.
func labelText(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, clean(k)+"="+clean(labels[k]))
	}
	return strings.Join(parts, " ")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func shortArgv(argv []string) string { return cleanArgv(argv, 60) }

func exitText(code, sig *int) (string, bool) {
	switch {
	case code != nil:
		return fmt.Sprintf("%d", *code), true
	case sig != nil:
		return fmt.Sprintf("signal %d", *sig), true
	}
	return "", false
}

func tstr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// table is a tab-aligned table written through one buffer: a listing of
// thousands of rows is a few writes, not one per cell.
type table struct {
	*tabwriter.Writer
	buf *bufio.Writer
}

func newTable(w io.Writer) *table {
	buf := bufio.NewWriterSize(w, 64<<10)
	return &table{Writer: tabwriter.NewWriter(buf, 0, 4, 2, ' ', 0), buf: buf}
}

// Flush writes out the aligned table.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	return t.buf.Flush()
}
