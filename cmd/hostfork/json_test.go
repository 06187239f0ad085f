package main

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/support"
	"github.com/habemus-papadum/hostfork/spec"
)

// The JSON contract of the CLI (docs/json.md) is checked three ways:
//
//   - TestJSONDoc: every shape's table in docs/json.md lists exactly the
//     keys of its Go type (json tags, embedded structs flattened), with the
//     type and presence the type implies, and every CLI command with a
//     --json flag is listed among the readers;
//   - TestJSONReaders: real CLI runs of every reader, each output checked
//     against the documented shape (no missing, undocumented or renamed
//     key; values of the documented type; durations Go duration strings;
//     times RFC 3339 in UTC; no *_ns key), and the same environment or
//     command read by different readers has the same keys and the same
//     computed values.

const jsonDocPath = "../../docs/json.md"

// reapPass is one line of 'reap --watch --json': the reap report with the
// time of the pass (internal/cli reapWatch).
type reapPass struct {
	At time.Time `json:"at"`
	*api.ReapReport
}

// usageBtrfs is 'usage --json --btrfs-sizes': the usage object with the
// measured Btrfs sizes as one more key.
type usageBtrfs struct {
	api.Usage
	BtrfsSizes []api.BtrfsSize `json:"btrfs_sizes"`
}

// supportUninstall is 'support uninstall --json' (internal/cli
// supportUninstall).
type supportUninstall struct {
	ActiveRuns []api.Command `json:"active_runs"`
	*support.UninstallResult
}

// jsonShapes names every documented object shape and its Go type.
var jsonShapes = []struct {
	name string
	typ  reflect.Type
}{
	{"env", reflect.TypeFor[api.Env]()},
	{"command", reflect.TypeFor[api.Command]()},
	{"identity", reflect.TypeFor[api.Identity]()},
	{"deadline_move", reflect.TypeFor[api.DeadlineMove]()},
	{"dir_entry", reflect.TypeFor[api.DirEntry]()},
	{"tree", reflect.TypeFor[api.Tree]()},
	{"fork_origin", reflect.TypeFor[api.ForkOrigin]()},
	{"stream_capture", reflect.TypeFor[api.StreamCapture]()},
	{"limit_group", reflect.TypeFor[limits.Group]()},
	{"limit_evidence", reflect.TypeFor[limits.Evidence]()},
	{"memory_evidence", reflect.TypeFor[limits.MemoryEvidence]()},
	{"cpu_evidence", reflect.TypeFor[limits.CPUEvidence]()},
	{"pids_evidence", reflect.TypeFor[limits.PidsEvidence]()},
	{"event", reflect.TypeFor[api.Event]()},
	{"capture_result", reflect.TypeFor[api.CaptureOutput]()},
	{"wait_outcome", reflect.TypeFor[api.WaitOutcome]()},
	{"match", reflect.TypeFor[api.Match]()},
	{"captured_stream", reflect.TypeFor[api.CapturedStream]()},
	{"stream_result", reflect.TypeFor[api.StreamResult]()},
	{"reap_report", reflect.TypeFor[api.ReapReport]()},
	{"reap_action", reflect.TypeFor[api.ReapAction]()},
	{"reap_pending", reflect.TypeFor[api.ReapPending]()},
	{"reap_pass", reflect.TypeFor[reapPass]()},
	{"gc_report", reflect.TypeFor[api.GCReport]()},
	{"gc_item", reflect.TypeFor[api.GCItem]()},
	{"usage", reflect.TypeFor[api.Usage]()},
	{"pool_usage", reflect.TypeFor[api.PoolUsage]()},
	{"usage_btrfs", reflect.TypeFor[usageBtrfs]()},
	{"btrfs_size", reflect.TypeFor[api.BtrfsSize]()},
	{"capacity", reflect.TypeFor[api.CapacityReport]()},
	{"reservation", reflect.TypeFor[api.Reservation]()},
	{"sample", reflect.TypeFor[api.Sample]()},
	{"live_workload", reflect.TypeFor[api.LiveWorkload]()},
	{"export_result", reflect.TypeFor[api.ExportResult]()},
	{"baseline", reflect.TypeFor[api.Baseline]()},
	{"plan", reflect.TypeFor[spec.Plan]()},
	{"planned_tree", reflect.TypeFor[spec.PlannedTree]()},
	{"planned_limit", reflect.TypeFor[spec.PlannedLimit]()},
	{"view", reflect.TypeFor[spec.ViewPlan]()},
	{"view_rule", reflect.TypeFor[spec.ViewRule]()},
	{"version", reflect.TypeFor[cli.BuildInfo]()},
	{"doctor_report", reflect.TypeFor[doctor.Report]()},
	{"doctor_needs", reflect.TypeFor[doctor.Needs]()},
	{"doctor_plan", reflect.TypeFor[doctor.PlanSummary]()},
	{"doctor_check", reflect.TypeFor[doctor.Check]()},
	{"support_plan", reflect.TypeFor[support.Plan]()},
	{"support_units", reflect.TypeFor[support.Units]()},
	{"support_file", reflect.TypeFor[support.File]()},
	{"support_install", reflect.TypeFor[support.InstallResult]()},
	{"support_status", reflect.TypeFor[support.Status]()},
	{"support_unit", reflect.TypeFor[support.UnitStatus]()},
	{"support_uninstall", reflect.TypeFor[supportUninstall]()},
}

// opaqueTypes are objects documented elsewhere or as a whole (the
// environment spec is docs/spec.md; doctor's facts are diagnostics): their
// values are still checked key by key against the Go type.
var opaqueTypes = map[reflect.Type]string{
	reflect.TypeFor[spec.Environment](): "spec",
	reflect.TypeFor[doctor.Facts]():     "facts",
}

// rawShapes are json.RawMessage fields whose content has a Go type.
// Others (a tree's storage record) are documented as "object".
var rawShapes = map[string]reflect.Type{
	"env.spec":   reflect.TypeFor[spec.Environment](),
	"env.view":   reflect.TypeFor[spec.ViewPlan](),
	"env.limits": reflect.TypeFor[limits.Group](),
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[api.Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

func shapeType(name string) reflect.Type {
	for _, s := range jsonShapes {
		if s.name == name {
			return s.typ
		}
	}
	return nil
}

func shapeName(t reflect.Type) (string, bool) {
	for _, s := range jsonShapes {
		if s.typ == t {
			return s.name, true
		}
	}
	return "", false
}

// jsonField is one key of a struct's JSON object.
type jsonField struct {
	key       string
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the keys encoding/json writes for struct type t:
// embedded structs without a name of their own are flattened, "-" is
// skipped.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		omit := slices.Contains(o, "omitempty") || slices.Contains(o, "omitzero")
		out = append(out, jsonField{key: name, typ: f.Type, omitempty: omit})
	}
	return out
}

// docType is how docs/json.md writes the type of a value of Go type t.
func docType(t reflect.Type) string {
	switch {
	case t == timeType:
		return "time"
	case t == durationType:
		return "duration"
	case t == rawType:
		return "object"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return "base64"
	case isTextMarshaler(t):
		return "string"
	}
	if n, ok := shapeName(t); ok {
		return n
	}
	if n, ok := opaqueTypes[t]; ok {
		return n
	}
	switch t.Kind() {
	case reflect.Pointer:
		return docType(t.Elem()) + " or null"
	case reflect.Slice:
		return "[" + docType(t.Elem()) + "]"
	case reflect.Map:
		return "{string: " + docType(t.Elem()) + "}"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "?" + t.String()
}

// isTextMarshaler: encoding/json writes a value of t as a string (a
// Duration and a time are handled before).
func isTextMarshaler(t reflect.Type) bool {
	tm := reflect.TypeFor[encoding.TextMarshaler]()
	return t.Kind() != reflect.Pointer && (t.Implements(tm) || reflect.PointerTo(t).Implements(tm))
}

// fieldDocType is docType with the raw-message shapes applied. A nil
// pointer under omitempty is left out, never written as null.
func fieldDocType(shape string, f jsonField) string {
	if rt, ok := rawShapes[shape+"."+f.key]; ok {
		return docType(rt)
	}
	if f.omitempty && f.typ.Kind() == reflect.Pointer {
		return docType(f.typ.Elem())
	}
	return docType(f.typ)
}

// docTypeMatches: the documented type is the derived one; an array or
// object that can be null says so with " or null".
func docTypeMatches(documented string, f jsonField, derived string) bool {
	if documented == derived {
		return true
	}
	k := f.typ.Kind()
	return (k == reflect.Slice || k == reflect.Map) && f.typ != rawType && documented == derived+" or null"
}

// Presence words of the "when" column.
const (
	whenAlways = "always"
	whenIfSet  = "if set"
)

// docRow is one row of a shape's table.
type docRow struct {
	key, typ, when string
	line           int
}

type docShape struct {
	name, extends string
	rows          []docRow
	line          int
}

// docReader is one row of the readers table.
type docReader struct {
	command string   // as written
	path    string   // the cobra command path, e.g. "baseline add"
	shapes  []string // shapes named in the "prints" column
	line    int
}

type jsonDoc struct {
	shapes  map[string]*docShape
	order   []string
	readers []docReader
}

var (
	shapeMarker   = regexp.MustCompile(`^<!-- shape: ([a-z_]+)(?: extends ([a-z_]+))? -->$`)
	readersMarker = "<!-- readers -->"
	backticked    = regexp.MustCompile("`([^`]*)`")
)

func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func unquote(cell string) string { return strings.TrimSpace(strings.Trim(cell, "`")) }

// loadJSONDoc parses docs/json.md: a table after each "<!-- shape: NAME -->"
// marker (columns key, type, when, meaning) and the table after
// "<!-- readers -->" (columns command, prints, ...).
func loadJSONDoc(t *testing.T) *jsonDoc {
	t.Helper()
	b, err := os.ReadFile(jsonDocPath)
	if err != nil {
		t.Fatalf("reading the JSON contract: %v", err)
	}
	d := &jsonDoc{shapes: map[string]*docShape{}}
	const (
		none = iota
		inShape
		inReaders
	)
	mode, started := none, false
	var cur *docShape
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		line = strings.TrimRight(line, "\r")
		if m := shapeMarker.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			if d.shapes[m[1]] != nil {
				t.Errorf("%s:%d: shape %s is documented twice", jsonDocPath, n, m[1])
			}
			cur = &docShape{name: m[1], extends: m[2], line: n}
			d.shapes[m[1]] = cur
			d.order = append(d.order, m[1])
			mode, started = inShape, false
			continue
		}
		if strings.TrimSpace(line) == readersMarker {
			mode, started = inReaders, false
			continue
		}
		if mode == none {
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			if started { // the table ended; prose before it is allowed
				mode = none
			}
			continue
		}
		started = true
		cells := tableCells(line)
		if strings.HasPrefix(cells[0], "---") || strings.HasPrefix(cells[0], ":--") || cells[0] == "key" || cells[0] == "command" {
			continue
		}
		switch mode {
		case inShape:
			if len(cells) < 4 {
				t.Errorf("%s:%d: a shape row has key, type, when and meaning: %q", jsonDocPath, n, line)
				continue
			}
			cur.rows = append(cur.rows, docRow{key: unquote(cells[0]), typ: unquote(cells[1]), when: cells[2], line: n})
		case inReaders:
			if len(cells) < 2 {
				t.Errorf("%s:%d: a reader row has command and prints: %q", jsonDocPath, n, line)
				continue
			}
			r := docReader{command: unquote(cells[0]), line: n}
			var path []string
			for _, w := range strings.Fields(r.command)[1:] {
				if !regexp.MustCompile(`^[a-z]+$`).MatchString(w) {
					break
				}
				path = append(path, w)
			}
			r.path = strings.Join(path, " ")
			for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
				r.shapes = append(r.shapes, strings.Trim(m[1], "[]"))
			}
			d.readers = append(d.readers, r)
		}
	}
	return d
}

// fields are a shape's documented rows, its parent's first.
func (d *jsonDoc) fields(name string) []docRow {
	s := d.shapes[name]
	if s == nil {
		return nil
	}
	var rows []docRow
	if s.extends != "" {
		rows = append(rows, d.fields(s.extends)...)
	}
	return append(rows, s.rows...)
}

// TestJSONDoc checks docs/json.md against the Go types and the CLI's
// commands, so that neither can change without the other.
func TestJSONDoc(t *testing.T) {
	d := loadJSONDoc(t)
	t.Run("shapes", func(t *testing.T) {
		for _, s := range jsonShapes {
			ds := d.shapes[s.name]
			if ds == nil {
				t.Errorf("%s: no table for shape %s (%v): add <!-- shape: %s --> and its table", jsonDocPath, s.name, s.typ, s.name)
				continue
			}
			if ds.extends != "" && d.shapes[ds.extends] == nil {
				t.Errorf("%s:%d: %s extends unknown shape %s", jsonDocPath, ds.line, s.name, ds.extends)
			}
			rows := map[string]docRow{}
			for _, r := range d.fields(s.name) {
				if _, dup := rows[r.key]; dup {
					t.Errorf("%s:%d: %s.%s is documented twice", jsonDocPath, r.line, s.name, r.key)
				}
				rows[r.key] = r
			}
			for _, f := range jsonFields(s.typ) {
				r, ok := rows[f.key]
				if !ok {
					t.Errorf("%s:%d: shape %s lacks key %q (%v has it): document it", jsonDocPath, ds.line, s.name, f.key, s.typ)
					continue
				}
				delete(rows, f.key)
				if want := fieldDocType(s.name, f); !docTypeMatches(r.typ, f, want) {
					t.Errorf("%s:%d: %s.%s: type is written %q; the Go type gives %q", jsonDocPath, r.line, s.name, f.key, r.typ, want)
				}
				want := whenAlways
				if f.omitempty {
					want = whenIfSet
				}
				if r.when != want {
					t.Errorf("%s:%d: %s.%s: when is %q; the json tag gives %q", jsonDocPath, r.line, s.name, f.key, r.when, want)
				}
			}
			for k, r := range rows {
				t.Errorf("%s:%d: %s.%s is documented but %v has no such key", jsonDocPath, r.line, s.name, k, s.typ)
			}
		}
		for _, name := range d.order {
			if shapeType(name) == nil {
				t.Errorf("%s:%d: shape %s has no Go type in jsonShapes (cmd/hostfork/json_test.go)", jsonDocPath, d.shapes[name].line, name)
			}
		}
	})
	t.Run("reachable types are documented", func(t *testing.T) {
		seen := map[reflect.Type]bool{}
		var walk func(from string, t2 reflect.Type)
		walk = func(from string, ty reflect.Type) {
			for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
				if ty.Kind() == reflect.Slice && ty.Elem().Kind() == reflect.Uint8 {
					return
				}
				ty = ty.Elem()
			}
			if ty.Kind() != reflect.Struct || ty == timeType || seen[ty] {
				return
			}
			if _, ok := opaqueTypes[ty]; ok {
				return
			}
			if _, ok := shapeName(ty); !ok {
				t.Errorf("%v (reached from %s) is written as JSON but has no documented shape", ty, from)
				return
			}
			seen[ty] = true
			name, _ := shapeName(ty)
			for _, f := range jsonFields(ty) {
				walk(name+"."+f.key, f.typ)
				if rt, ok := rawShapes[name+"."+f.key]; ok {
					walk(name+"."+f.key, rt)
				}
			}
		}
		for _, s := range jsonShapes {
			walk(s.name, s.typ)
		}
	})
	t.Run("readers", func(t *testing.T) {
		root, _ := cli.NewRootWith(io.Discard, io.Discard, cli.Verbs{})
		documented := map[string]bool{}
		for _, r := range d.readers {
			documented[r.path] = true
			if len(r.shapes) == 0 {
				t.Errorf("%s:%d: reader %q names no shape", jsonDocPath, r.line, r.command)
			}
			for _, s := range r.shapes {
				if d.shapes[s] == nil {
					t.Errorf("%s:%d: reader %q prints shape %q, which is not documented", jsonDocPath, r.line, r.command, s)
				}
			}
			if c, _, err := root.Find(strings.Fields(r.path)); err != nil || c.CommandPath() != "hostfork "+r.path {
				t.Errorf("%s:%d: reader %q: no command 'hostfork %s'", jsonDocPath, r.line, r.command, r.path)
			}
		}
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			for _, sub := range c.Commands() {
				walk(sub)
			}
			if hasJSONFlag(c) && !c.HasSubCommands() {
				path := strings.TrimPrefix(c.CommandPath(), "hostfork ")
				if !documented[path] {
					t.Errorf("'%s' has a --json flag but %s lists no reader for it", c.CommandPath(), jsonDocPath)
				}
			}
		}
		walk(root)
	})
	t.Run("no _ns keys", func(t *testing.T) {
		for _, name := range d.order {
			for _, r := range d.shapes[name].rows {
				if strings.HasSuffix(r.key, "_ns") {
					t.Errorf("%s:%d: %s.%s: durations are Go duration strings, never *_ns integers", jsonDocPath, r.line, name, r.key)
				}
			}
		}
	})
}

func hasJSONFlag(c *cobra.Command) bool {
	for p := c; p != nil; p = p.Parent() {
		if p == c && c.Flags().Lookup("json") != nil {
			return true
		}
		if p.PersistentFlags().Lookup("json") != nil {
			return true
		}
	}
	return false
}

// jsonChecker checks decoded JSON values against the documented shapes.
type jsonChecker struct {
	t      *testing.T
	doc    *jsonDoc
	reader string
	// once holds the *_ns keys reported already: one line per key, not
	// one per reader that prints it.
	once map[string]bool
}

var (
	idPattern = regexp.MustCompile(`^[0-9a-v]{10}$`)
	// enums are the documented values of enumerated keys.
	enums = map[string][]string{
		"env.state":            {"creating", "active", "stopping", "stopped", "failed"},
		"env.tier":             {"systemd-scope", "cgroup2", "subreaper"},
		"env.owner_exit":       {"stop", "detach"},
		"env.owner_alive":      {"alive", "gone", "unverified"},
		"env.stop_reason":      stopReasons,
		"command.record_state": {"reserved", "running", "exited", "failed", "unverified"},
		"command.state":        {"alive", "exited", "unverified"},
		"command.leader_state": phases,
		"command.tree_state":   phases,
		"command.output":       {"files", "pipe", "inherit"},
		"command.tier":         {"systemd-scope", "cgroup2", "subreaper"},
		"command.stop_reason":  stopReasons,
		"tree.kind":            {"btrfs", "overlay", "copy"},
		"tree.state":           {"allocated", "removed"},
		"stream_capture.state": {"complete", "incomplete", "failed"},
		"stream_result.state":  {"complete", "incomplete", "failed"},
		"event.reason":         stopReasons,
		"event.kind": {"env.created", "env.failed", "env.stop_decided", "env.stopped", "env.deadline_moved", "command.started", "command.failed",
			"command.leader_exited", "command.tree_exited", "command.unverified", "command.stop_decided", "deadline", "idle", "oom", "reap", "gc"},
		"export_result.label": {"complete", "live/inconsistent", "partial", "failed"},
		"plan.tier":           {"systemd-scope", "cgroup2", "subreaper"},
		"plan.owner_exit":     {"stop", "detach"},
	}
	stopReasons = []string{"", "user", "deadline", "timeout", "idle", "owner-exit", "cancelled", "completed", "keeper-lost", "reboot", "abandoned", "limit"}
	phases      = []string{"pending", "live", "exited", "unverified", "unknown"}
	// idKeys hold environment or command ids.
	idKeys = map[string]bool{"env.id": true, "command.id": true, "command.env": true, "event.env": true, "event.command": true}
)

func (ck *jsonChecker) errorf(path, format string, args ...any) {
	ck.t.Helper()
	ck.t.Errorf("%s: %s: %s", ck.reader, path, fmt.Sprintf(format, args...))
}

// shape checks that v is an object of the named shape.
func (ck *jsonChecker) shape(v any, name string) {
	ck.t.Helper()
	ck.value(name, v, shapeType(name), false)
}

// list checks that v is an array of the named shape.
func (ck *jsonChecker) list(v any, name string) {
	ck.t.Helper()
	a, ok := v.([]any)
	if !ok {
		ck.errorf("[]", "want an array of %s, got %s", name, jsonKind(v))
		return
	}
	for i, e := range a {
		ck.value(fmt.Sprintf("%s[%d]", name, i), e, shapeType(name), false)
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

func (ck *jsonChecker) value(path string, v any, t reflect.Type, nullable bool) {
	ck.t.Helper()
	if v == nil {
		if !nullable {
			ck.errorf(path, "is null; documented as never null")
		}
		return
	}
	switch {
	case t == timeType:
		s, ok := v.(string)
		if !ok {
			ck.errorf(path, "a time is an RFC 3339 string, got %s", jsonKind(v))
			return
		}
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			ck.errorf(path, "%q is not an RFC 3339 time: %v", s, err)
		} else if !strings.HasSuffix(s, "Z") {
			ck.errorf(path, "%q is not in UTC (times are written with Z)", s)
		}
		return
	case t == durationType:
		s, ok := v.(string)
		if !ok {
			ck.errorf(path, "a duration is a Go duration string, got %s %v", jsonKind(v), v)
			return
		}
		if _, err := time.ParseDuration(s); err != nil {
			ck.errorf(path, "%q does not parse with time.ParseDuration: %v", s, err)
		}
		return
	case t == rawType:
		if _, ok := v.(map[string]any); !ok {
			ck.errorf(path, "want an object, got %s", jsonKind(v))
		}
		return
	case isTextMarshaler(t):
		if _, ok := v.(string); !ok {
			ck.errorf(path, "%v is written as text: want a string, got %s", t, jsonKind(v))
		}
		return
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		s, ok := v.(string)
		if !ok {
			ck.errorf(path, "want base64 in a string, got %s", jsonKind(v))
		} else if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			ck.errorf(path, "not base64: %v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		ck.value(path, v, t.Elem(), nullable)
	case reflect.Struct:
		ck.object(path, v, t)
	case reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			ck.errorf(path, "want an array, got %s", jsonKind(v))
			return
		}
		for i, e := range a {
			ck.value(fmt.Sprintf("%s[%d]", path, i), e, t.Elem(), t.Elem().Kind() == reflect.Pointer)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			ck.errorf(path, "want an object, got %s", jsonKind(v))
			return
		}
		for k, e := range m {
			ck.value(path+"."+k, e, t.Elem(), t.Elem().Kind() == reflect.Pointer)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			ck.errorf(path, "want a string, got %s", jsonKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			ck.errorf(path, "want a boolean, got %s", jsonKind(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			ck.errorf(path, "want an integer, got %s", jsonKind(v))
		} else if strings.ContainsAny(string(n), ".eE") {
			ck.errorf(path, "want an integer, got %s", n)
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			ck.errorf(path, "want a number, got %s", jsonKind(v))
		}
	default:
		ck.errorf(path, "no check for Go type %v", t)
	}
}

// checkField is one expected key of an object.
type checkField struct {
	key, docTyp, when string
	typ               reflect.Type
}

// object checks one object: its keys against the documented shape of t
// (or t's own fields for an opaque type), then every value.
func (ck *jsonChecker) object(path string, v any, t reflect.Type) {
	ck.t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		ck.errorf(path, "want an object, got %s", jsonKind(v))
		return
	}
	name, documented := shapeName(t)
	goFields := map[string]jsonField{}
	for _, f := range jsonFields(t) {
		goFields[f.key] = f
	}
	var fields []checkField
	if documented {
		for _, r := range ck.doc.fields(name) {
			f, ok := goFields[r.key]
			if !ok {
				continue // TestJSONDoc reports it
			}
			fields = append(fields, checkField{key: r.key, docTyp: r.typ, when: r.when, typ: f.typ})
		}
	} else {
		for _, f := range jsonFields(t) {
			when := whenAlways
			if f.omitempty {
				when = whenIfSet
			}
			fields = append(fields, checkField{key: f.key, docTyp: docType(f.typ), when: when, typ: f.typ})
		}
	}
	var missing, extra []string
	known := map[string]bool{}
	for _, f := range fields {
		known[f.key] = true
		val, present := m[f.key]
		if !present {
			if f.when == whenAlways {
				missing = append(missing, f.key)
			}
			continue
		}
		p := path + "." + f.key
		if rt, ok := rawShapes[name+"."+f.key]; documented && ok {
			ck.value(p, val, rt, false)
			continue
		}
		ck.value(p, val, f.typ, strings.HasSuffix(f.docTyp, " or null"))
		if s, ok := val.(string); ok && documented {
			if vals, ok := enums[name+"."+f.key]; ok && !slices.Contains(vals, s) {
				ck.errorf(p, "%q is not one of the documented values %q", s, vals)
			}
			if idKeys[name+"."+f.key] && !(s == "" && f.when == whenIfSet) && !idPattern.MatchString(s) {
				ck.errorf(p, "%q is not an id (10 characters of lowercase base32hex)", s)
			}
		}
	}
	for k := range m {
		if !known[k] {
			extra = append(extra, k)
		}
		if strings.HasSuffix(k, "_ns") && !ck.once[t.String()+"."+k] {
			if ck.once != nil {
				ck.once[t.String()+"."+k] = true
			}
			ck.errorf(path+"."+k, "a *_ns key (%v): durations are Go duration strings (reported for the first reader only)", t)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	what := name
	if !documented {
		what = t.String()
	}
	if len(missing) > 0 {
		ck.errorf(path, "%s lacks documented key(s) %q", what, missing)
	}
	if len(extra) > 0 {
		ck.errorf(path, "undocumented key(s) %q in %s (docs/json.md, shape %s)", extra, what, what)
	}
}

// jsonZone is a zone other than UTC for every CLI run, so that a time
// written in local time shows.
const jsonZone = "America/New_York"

// jsonRun runs hostfork with args, requires one of the exit codes (0 when
// none is given) and returns stdout.
func jsonRun(t *testing.T, c *hostforkCLI, codes []int, args ...string) string {
	t.Helper()
	cmd := c.command(args...)
	cmd.Env = append(cmd.Env, "TZ="+jsonZone)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("hostfork %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	if codes == nil {
		codes = []int{0}
	}
	if !slices.Contains(codes, code) {
		t.Fatalf("hostfork %s: exit %d (want %v)\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, codes, out.String(), errb.String())
	}
	return out.String()
}

// decodeOne decodes exactly one JSON value (numbers kept as json.Number).
func decodeOne(t *testing.T, what, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: not JSON: %v\n%s", what, err, s)
		return nil
	}
	if dec.More() {
		t.Errorf("%s: more than one JSON value:\n%s", what, s)
	}
	return v
}

// decodeLines decodes one JSON object per line.
func decodeLines(t *testing.T, what, s string) []any {
	t.Helper()
	var out []any
	for i, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if line == "" {
			t.Errorf("%s: line %d is empty", what, i+1)
			continue
		}
		out = append(out, decodeOne(t, fmt.Sprintf("%s line %d", what, i+1), line))
	}
	return out
}

func asObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func byID(objs []map[string]any, id string) map[string]any {
	for _, o := range objs {
		if o["id"] == id {
			return o
		}
	}
	return nil
}

func commandsOf(env map[string]any) []map[string]any { return objects(env["commands"]) }

func keysOf(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// reading is one reader's view of an object.
type reading struct {
	reader string
	obj    map[string]any
}

// sameKeys requires every reading of one object to have the same keys as
// the first.
func sameKeys(t *testing.T, what string, rs []reading) {
	t.Helper()
	var ref *reading
	for i := range rs {
		if rs[i].obj == nil {
			t.Errorf("%s: %s did not show it", what, rs[i].reader)
			continue
		}
		if ref == nil {
			ref = &rs[i]
			continue
		}
		want, got := keysOf(ref.obj), keysOf(rs[i].obj)
		var missing, extra []string
		for _, k := range want {
			if _, ok := rs[i].obj[k]; !ok {
				missing = append(missing, k)
			}
		}
		for _, k := range got {
			if _, ok := ref.obj[k]; !ok {
				extra = append(extra, k)
			}
		}
		if len(missing)+len(extra) > 0 {
			t.Errorf("%s: %s and %s give different key sets: %s lacks %q, has extra %q", what, ref.reader, rs[i].reader, rs[i].reader, missing, extra)
		}
	}
}

// sameValues requires every reading to agree on the given keys.
func sameValues(t *testing.T, what string, rs []reading, keys ...string) {
	t.Helper()
	for _, k := range keys {
		var ref *reading
		for i := range rs {
			if rs[i].obj == nil {
				continue
			}
			if ref == nil {
				ref = &rs[i]
				continue
			}
			a, _ := json.Marshal(normalize(k, ref.obj[k]))
			b, _ := json.Marshal(normalize(k, rs[i].obj[k]))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s: %s says %s, %s says %s", what, k, ref.reader, a, rs[i].reader, b)
			}
		}
	}
}

// normalize compares a list of commands by their ids and computed fields.
func normalize(key string, v any) any {
	if key != "commands" {
		return v
	}
	a, ok := v.([]any)
	if !ok {
		return v
	}
	var out []string
	for _, e := range a {
		m := asObject(e)
		out = append(out, fmt.Sprint(m["id"], "/", m["state"], "/", m["stoppable"], "/", m["pid"], "/", m["deadline_at"]))
	}
	return out
}

// Computed fields, compared between readers that read at the same time.
var (
	envComputed     = []string{"state", "owner_alive", "expired", "due", "deadline_at", "commands"}
	commandComputed = []string{"state", "record_state", "stoppable", "pid", "deadline_at"}
)

// TestJSONReaders runs every reader of the CLI on a real store and checks
// its output against docs/json.md.
func TestJSONReaders(t *testing.T) {
	c := newCLI(t)
	doc := loadJSONDoc(t)
	dir := t.TempDir()
	base, target, scratch := filepath.Join(dir, "base"), filepath.Join(dir, "target"), filepath.Join(dir, "scratch")
	for _, d := range []string{base, target, scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "f.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stop what is left before newCLI's cleanup kills it (limit groups
	// and the keeper's mounts go with a stop).
	t.Cleanup(func() { c.run("stop", "--all", "--grace", "0s") })
	once := map[string]bool{}
	ck := func(t *testing.T, reader string) *jsonChecker {
		return &jsonChecker{t: t, doc: doc, reader: reader, once: once}
	}
	run := func(t *testing.T, args ...string) any {
		t.Helper()
		return decodeOne(t, strings.Join(args, " "), jsonRun(t, c, nil, args...))
	}
	id := func(v any) string { s, _ := asObject(v)["id"].(string); return s }

	// What the readers will show: an environment made by create with a
	// command run by exec, a detached run, and an environment with an
	// overlay tree, a view and limits.
	created := run(t, "create", "--ttl", "10m", "--purpose", "json contract", "--label", "team=json", "--json")
	envE := id(created)
	execd := run(t, "exec", "--detach", "--json", "--label", "role=worker", envE, "--", "sleep", "300")
	cmdC := id(execd)
	ran := run(t, "run", "--detach", "--json", "--ttl", "10m", "--purpose", "json run", "--label", "team=json", "--", "sleep", "300")
	envR := id(ran)
	var cmdR string
	ranCmds := commandsOf(asObject(ran))
	if len(ranCmds) != 1 {
		t.Fatalf("run --detach --json: want the run's one command in commands, got %v", asObject(ran)["commands"])
	}
	cmdR, _ = ranCmds[0]["id"].(string)
	overlay := run(t, "create", "--json", "--ttl", "10m", "--tree", "proj=overlay:"+base, "--replace", target+"=proj",
		"--scratch", scratch, "--memory", "256M", "--pids", "512", "--allow-weaker")
	envO := id(overlay)
	if envE == "" || cmdC == "" || envR == "" || cmdR == "" || envO == "" {
		t.Fatalf("ids missing: create %q, exec %q, run %q/%q, create %q", envE, cmdC, envR, cmdR, envO)
	}

	// Settled: both leaders live.
	eventually(t, "both commands live", func() string {
		for _, r := range c.ps(false) {
			if (r.ID == cmdC || r.ID == cmdR) && (r.State != "alive" || r.PID == 0) {
				return fmt.Sprintf("%s is %s", r.ID, r.State)
			}
		}
		return ""
	})

	// The readers of environments and commands, one right after another.
	psLive := run(t, "ps", "--json")
	psAll := run(t, "ps", "--all", "--json")
	psEnv := run(t, "ps", "--env", envE, "--json")
	envsActive := run(t, "envs", "--json")
	envsAll := run(t, "envs", "--all", "--json")
	statusE := run(t, "status", "--json", envE)
	statusR := run(t, "status", "--json", envR)
	statusO := run(t, "status", "--json", envO)
	statusC := run(t, "status", "--json", cmdC)
	statusCR := run(t, "status", "--json", cmdR)

	t.Run("env and command readers", func(t *testing.T) {
		ck(t, "create --json").shape(created, "env")
		ck(t, "exec --detach --json").shape(execd, "command")
		ck(t, "run --detach --json").shape(ran, "env")
		ck(t, "create --json (overlay tree, view, limits)").shape(overlay, "env")
		for _, k := range []string{"trees", "keeper", "view", "limits", "limits_now"} {
			if v, ok := asObject(overlay)[k]; !ok || v == nil || fmt.Sprint(v) == "[]" {
				t.Errorf("create --json of an environment with a tree, a view and limits: %s is %v", k, v)
			}
		}
		ck(t, "ps --json").list(psLive, "command")
		ck(t, "ps --all --json").list(psAll, "command")
		ck(t, "ps --env ENV --json").list(psEnv, "command")
		ck(t, "envs --json").list(envsActive, "env")
		ck(t, "envs --all --json").list(envsAll, "env")
		ck(t, "status --json ENV").shape(statusE, "env")
		ck(t, "status --json ENV (run)").shape(statusR, "env")
		ck(t, "status --json ENV (overlay)").shape(statusO, "env")
		ck(t, "status --json CMD").shape(statusC, "command")
		ck(t, "status --json CMD (run)").shape(statusCR, "command")
	})
	statusOf := map[string]map[string]any{envE: asObject(statusE), envR: asObject(statusR)}
	t.Run("one command shape", func(t *testing.T) {
		for _, x := range []struct {
			id     string
			detach reading
			status map[string]any
			envOf  string
		}{
			{cmdC, reading{"exec --detach --json", asObject(execd)}, asObject(statusC), envE},
			{cmdR, reading{"run --detach --json (commands[0])", ranCmds[0]}, asObject(statusCR), envR},
		} {
			steady := []reading{
				{"status --json CMD", x.status},
				{"ps --json", byID(objects(psLive), x.id)},
				{"ps --all --json", byID(objects(psAll), x.id)},
				{"status --json ENV (commands)", byID(commandsOf(statusOf[x.envOf]), x.id)},
				{"envs --json (commands)", byID(commandsOf(byID(objects(envsActive), x.envOf)), x.id)},
				{"envs --all --json (commands)", byID(commandsOf(byID(objects(envsAll), x.envOf)), x.id)},
			}
			if x.envOf == envE {
				steady = append(steady, reading{"ps --env ENV --json", byID(objects(psEnv), x.id)})
			}
			what := "command " + x.id
			sameKeys(t, what, append([]reading{x.detach}, steady...))
			sameValues(t, what+" (read at the same moment)", steady, commandComputed...)
			// Read at its start: the same deadline; stoppable.
			sameValues(t, what+" (read at its start)", []reading{steady[0], x.detach}, "deadline_at", "stoppable")
			if st := x.status["state"]; st != "alive" {
				t.Errorf("%s: status --json says state %v for a live sleep", what, st)
			}
		}
	})
	t.Run("one environment shape", func(t *testing.T) {
		for _, x := range []struct {
			id      string
			created reading
			status  map[string]any
		}{
			{envE, reading{"create --json", asObject(created)}, asObject(statusE)},
			{envR, reading{"run --detach --json", asObject(ran)}, asObject(statusR)},
			{envO, reading{"create --json (overlay)", asObject(overlay)}, asObject(statusO)},
		} {
			steady := []reading{
				{"status --json ENV", x.status},
				{"envs --json", byID(objects(envsActive), x.id)},
				{"envs --all --json", byID(objects(envsAll), x.id)},
			}
			what := "environment " + x.id
			sameKeys(t, what, append([]reading{x.created}, steady...))
			sameValues(t, what+" (read at the same moment)", steady, envComputed...)
			sameValues(t, what+" (read at its creation)", []reading{steady[0], x.created}, "deadline_at", "expired")
		}
	})

	t.Run("plan", func(t *testing.T) {
		out := jsonRun(t, c, []int{0, 121}, "plan", "--json", "--ttl", "5m", "--tree", "proj=overlay:"+base, "--replace", target+"=proj",
			"--scratch", scratch, "--memory", "64M", "--allow-weaker")
		ck(t, "plan --json").shape(decodeOne(t, "plan --json", out), "plan")
	})
	t.Run("export", func(t *testing.T) {
		ck(t, "export --json").shape(run(t, "export", "--json", envO, "proj", "--to", filepath.Join(dir, "export")), "export_result")
	})
	t.Run("extend", func(t *testing.T) {
		out := asObject(run(t, "extend", "--json", envO, "--ttl", "20m"))
		ck(t, "extend --json").shape(out, "env")
		if moves, _ := out["deadline_moves"].([]any); len(moves) != 1 {
			t.Errorf("extend --json: deadline_moves %v, want one move", out["deadline_moves"])
		}
	})
	t.Run("ls", func(t *testing.T) {
		out := run(t, "ls", "--json", "-R", envO, target)
		arr, _ := out.([]any)
		if len(arr) == 0 {
			t.Fatalf("ls --json -R of the tree: %v", out)
		}
		for _, e := range arr {
			ck(t, "ls --json").shape(e, "dir_entry")
		}
	})
	t.Run("capacity", func(t *testing.T) { ck(t, "capacity --json").shape(run(t, "capacity", "--json"), "capacity") })
	t.Run("usage", func(t *testing.T) { ck(t, "usage --json").shape(run(t, "usage", "--json"), "usage") })
	t.Run("usage --btrfs-sizes", func(t *testing.T) {
		ck(t, "usage --json --btrfs-sizes").shape(run(t, "usage", "--json", "--btrfs-sizes"), "usage_btrfs")
	})
	t.Run("baseline", func(t *testing.T) {
		ck(t, "baseline ls --json (none)").list(run(t, "baseline", "ls", "--json"), "baseline")
		ck(t, "baseline add --json").shape(run(t, "baseline", "add", "--json", "json-base", base), "baseline")
		ck(t, "baseline ls --json").list(run(t, "baseline", "ls", "--json"), "baseline")
	})
	t.Run("version", func(t *testing.T) { ck(t, "version --json").shape(run(t, "version", "--json"), "version") })
	t.Run("doctor", func(t *testing.T) {
		out := jsonRun(t, c, []int{0, 121}, "doctor", "--json")
		ck(t, "doctor --json").shape(decodeOne(t, "doctor --json", out), "doctor_report")
	})
	t.Run("support", func(t *testing.T) {
		ck(t, "support plan --json").shape(run(t, "support", "plan", "--json"), "support_plan")
		out := jsonRun(t, c, []int{0, 1}, "support", "status", "--json")
		ck(t, "support status --json").shape(decodeOne(t, "support status --json", out), "support_status")
	})
	t.Run("run --capture", func(t *testing.T) {
		ck(t, "run --capture").shape(run(t, "run", "--capture", "--", "sh", "-c", "echo out; echo err >&2"), "capture_result")
	})

	// Stops print the final records.
	t.Run("stop a command", func(t *testing.T) {
		stopped := run(t, "stop", "--json", "--grace", "0s", cmdC)
		ck(t, "stop --json CMD").shape(stopped, "command")
		after := run(t, "status", "--json", cmdC)
		ck(t, "status --json CMD (stopped)").shape(after, "command")
		rs := []reading{{"status --json CMD", asObject(after)}, {"stop --json CMD", asObject(stopped)}}
		sameKeys(t, "stopped command "+cmdC, rs)
		sameValues(t, "stopped command "+cmdC, rs, commandComputed...)
	})
	t.Run("stop environments", func(t *testing.T) {
		stopped := run(t, "stop", "--json", "--grace", "0s", envE, envR)
		ck(t, "stop --json ENV ENV").list(stopped, "env")
		for _, envID := range []string{envE, envR} {
			after := run(t, "status", "--json", envID)
			ck(t, "status --json ENV (stopped)").shape(after, "env")
			rs := []reading{{"status --json ENV", asObject(after)}, {"stop --json ENV ENV", byID(objects(stopped), envID)}}
			sameKeys(t, "stopped environment "+envID, rs)
			sameValues(t, "stopped environment "+envID, rs, envComputed...)
		}
	})
	t.Run("stop nothing", func(t *testing.T) {
		out := jsonRun(t, c, nil, "stop", "--json", "--label", "no-such-label=x")
		if strings.TrimSpace(out) != "[]" {
			t.Errorf("stop --json --label K=V with nothing to stop: want [], got %q", out)
		}
	})
	t.Run("stop --all", func(t *testing.T) {
		ck(t, "stop --json --all").list(run(t, "stop", "--json", "--all", "--grace", "0s"), "env")
		ck(t, "ps --all --json (all stopped)").list(run(t, "ps", "--all", "--json"), "command")
		ck(t, "envs --all --json (all stopped)").list(run(t, "envs", "--all", "--json"), "env")
	})

	t.Run("events", func(t *testing.T) {
		lines := decodeLines(t, "events --json", jsonRun(t, c, nil, "events", "--json"))
		if len(lines) < 6 {
			t.Errorf("events --json: %d events, want the creations, starts and stops", len(lines))
		}
		for i, v := range lines {
			ck(t, fmt.Sprintf("events --json line %d", i+1)).shape(v, "event")
		}
	})
	t.Run("wait", func(t *testing.T) {
		env := id(run(t, "run", "--detach", "--json", "--ttl", "1m", "--", "sh", "-c", "echo ready; exec sleep 60"))
		matched := run(t, "wait", "--json", "--for", "^ready$", env)
		ck(t, "wait --json --for").shape(matched, "wait_outcome")
		ck(t, "wait --json --stalled").shape(run(t, "wait", "--json", "--stalled", "10ms", env), "wait_outcome")
		jsonRun(t, c, nil, "stop", env)
		ended := decodeOne(t, "wait --json (ended)", jsonRun(t, c, []int{113}, "wait", "--json", "--for", "never", env))
		ck(t, "wait --json --for (ended)").shape(ended, "wait_outcome")
		tree := decodeOne(t, "wait --json --tree", jsonRun(t, c, []int{124}, "wait", "--json", "--tree", env))
		ck(t, "wait --json --tree").shape(tree, "wait_outcome")
	})
	t.Run("reap", func(t *testing.T) {
		ck(t, "reap --json").shape(run(t, "reap", "--json"), "reap_report")
		line := reapWatchLine(t, c)
		ck(t, "reap --watch --json").shape(decodeOne(t, "reap --watch --json", line), "reap_pass")
	})
	t.Run("gc", func(t *testing.T) {
		v := run(t, "gc", "--json", "--dry-run", "--force", envE)
		ck(t, "gc --json --dry-run --force").shape(v, "gc_report")
		if d, _ := asObject(v)["deleted"].([]any); len(d) == 0 {
			t.Errorf("gc --dry-run --force %s: no deletion planned: %v", envE, v)
		}
		ck(t, "gc --json").shape(run(t, "gc", "--json"), "gc_report")
	})
}

// objects are the objects of a JSON array.
func objects(v any) []map[string]any {
	a, _ := v.([]any)
	var out []map[string]any
	for _, e := range a {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// reapWatchLine starts 'reap --watch --json', returns its first line and
// stops it.
func reapWatchLine(t *testing.T, c *hostforkCLI) string {
	t.Helper()
	cmd := c.command("reap", "--watch", "--json", "--interval", "1s")
	cmd.Env = append(cmd.Env, "TZ="+jsonZone)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		lines <- s
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Error("reap --watch --json printed no line in 30s")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Error("reap --watch did not end on SIGTERM")
	}
	return line
}
