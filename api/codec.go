package api

// Hand-written JSON codecs for the two records every hostfork call reads
// and writes: Env (encode and decode) and Command (encode). encoding/json
// builds a type's codec by reflection the first time a process uses the
// type, and a hostfork process is short: for Env and Command that first
// use cost about 0.4 ms of every CLI call (docs/decisions.md, 63).
//
// The bytes are exactly what encoding/json writes for the same value with
// SetEscapeHTML(false); json.Marshal then HTML-escapes them as before, so
// every caller sees the output it saw before these methods existed. The
// decoder takes the canonical documents hostfork writes; anything else
// (a key in another case, a duplicate key, a type it does not expect, a
// target that is not empty) goes to encoding/json, so the semantics are
// encoding/json's in every case. codec_test.go compares both ways over
// random records and fuzzes the decoder against encoding/json.

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// envNoCodec and commandNoCodec have the records' fields and none of their
// methods: encoding/json's own codec, for the decoder's fallback and the
// tests.
type (
	envNoCodec     Env
	commandNoCodec Command
)

// MarshalJSON encodes the record as encoding/json does.
func (e Env) MarshalJSON() ([]byte, error) {
	var w jsonWriter
	w.env(&e)
	return w.result()
}

// UnmarshalJSON decodes a record as encoding/json does.
func (e *Env) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil
	}
	if json.Valid(data) && isZeroEnv(e) {
		var n Env
		if decodeEnv(data, &n) {
			*e = n
			return nil
		}
	}
	return json.Unmarshal(data, (*envNoCodec)(e))
}

// MarshalJSON encodes the record as encoding/json does.
func (c Command) MarshalJSON() ([]byte, error) {
	var w jsonWriter
	w.command(&c)
	return w.result()
}

// isZeroEnv reports whether e holds nothing a decode could merge into.
func isZeroEnv(e *Env) bool {
	return e.ID == "" && e.Rev == 0 && e.State == "" && e.CreatedAt.IsZero() && e.BootID == "" &&
		e.Purpose == "" && e.Labels == nil && e.Tier == "" && e.CgroupPath == "" && e.CgroupInode == 0 &&
		e.RunDir == "" && e.OwnerExit == "" && e.Owner == nil && !e.UntilStopped && !e.AutoStop &&
		e.TTL == 0 && e.Grace == 0 && e.IdleTimeout == 0 && e.ActivatedAt == nil && e.DeadlineAt == nil &&
		e.Spec == nil && e.Trees == nil && e.Keeper == nil && e.View == nil && e.Limits == nil &&
		e.LimitEvidence == nil && e.Unit == "" && e.ScopeMembership == "" && e.ManagerResult == "" &&
		e.StopReason == "" && e.StopRequestedAt == nil && e.StoppedAt == nil && e.Abandoned == nil &&
		e.CleanupErrors == nil && e.Error == "" && e.OwnerAlive == "" && !e.Expired && e.Due == "" &&
		e.LimitsNow == nil && e.Commands == nil && e.ActivatedMono == 0 && e.DeadlineMono == 0
}

// jsonWriter appends one JSON value. Members and elements are separated by
// what the buffer ends with: a ',' goes before each one unless the
// enclosing '{' or '[' (or a member's ':') was the last byte written.
type jsonWriter struct {
	b   []byte
	err error
}

func (w *jsonWriter) result() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

func (w *jsonWriter) sep() {
	if n := len(w.b); n > 0 {
		switch w.b[n-1] {
		case '{', '[', ':':
			return
		}
		w.b = append(w.b, ',')
	}
}

// key starts a member.
func (w *jsonWriter) key(k string) {
	w.sep()
	w.b = appendJSONString(w.b, k)
	w.b = append(w.b, ':')
}

func (w *jsonWriter) str(k, v string) { w.key(k); w.b = appendJSONString(w.b, v) }

func (w *jsonWriter) strOmit(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *jsonWriter) int(k string, v int64) { w.key(k); w.b = strconv.AppendInt(w.b, v, 10) }

func (w *jsonWriter) uintOmit(k string, v uint64) {
	if v != 0 {
		w.key(k)
		w.b = strconv.AppendUint(w.b, v, 10)
	}
}

func (w *jsonWriter) bool(k string, v bool) { w.key(k); w.b = strconv.AppendBool(w.b, v) }

func (w *jsonWriter) intPtr(k string, v *int) {
	w.key(k)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = strconv.AppendInt(w.b, int64(*v), 10)
}

func (w *jsonWriter) boolPtr(k string, v *bool) {
	w.key(k)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = strconv.AppendBool(w.b, *v)
}

func (w *jsonWriter) time(k string, t time.Time) {
	w.key(k)
	w.timeValue(t)
}

func (w *jsonWriter) timeValue(t time.Time) {
	b, err := t.MarshalJSON()
	if err != nil {
		w.fail(err)
		return
	}
	w.b = append(w.b, b...)
}

func (w *jsonWriter) timePtr(k string, t *time.Time) {
	w.key(k)
	if t == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.timeValue(*t)
}

func (w *jsonWriter) duration(k string, d Duration) {
	w.key(k)
	w.b = appendJSONString(w.b, time.Duration(d).String())
}

// rawOmit writes a RawMessage member unless it is empty: compacted, as
// encoding/json writes what a Marshaler returns.
func (w *jsonWriter) rawOmit(k string, m json.RawMessage) {
	if len(m) == 0 {
		return
	}
	w.key(k)
	var buf bytes.Buffer
	if err := json.Compact(&buf, m); err != nil {
		w.fail(err)
		return
	}
	w.b = append(w.b, buf.Bytes()...)
}

func (w *jsonWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *jsonWriter) strings(k string, l []string) {
	w.key(k)
	if l == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for _, s := range l {
		w.sep()
		w.b = appendJSONString(w.b, s)
	}
	w.b = append(w.b, ']')
}

func (w *jsonWriter) stringsOmit(k string, l []string) {
	if len(l) > 0 {
		w.strings(k, l)
	}
}

func (w *jsonWriter) labels(k string, m map[string]string) {
	w.key(k)
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '{')
	for _, name := range sortedKeys(m) {
		w.str(name, m[name])
	}
	w.b = append(w.b, '}')
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (w *jsonWriter) identity(k string, id *Identity) {
	w.key(k)
	if id == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.identityValue(id)
}

func (w *jsonWriter) identityValue(id *Identity) {
	w.b = append(w.b, '{')
	w.str("boot_id", id.BootID)
	w.int("pid", int64(id.PID))
	w.key("start_time")
	w.b = strconv.AppendUint(w.b, id.StartTime, 10)
	w.b = append(w.b, '}')
}

func (w *jsonWriter) tree(t *Tree) {
	w.b = append(w.b, '{')
	w.str("name", t.Name)
	w.str("kind", t.Kind)
	w.strOmit("baseline", t.Baseline)
	w.str("source", t.Source)
	w.str("host_path", t.HostPath)
	w.str("workload_path", t.WorkloadPath)
	w.rawOmit("storage", t.Storage)
	w.str("state", t.State)
	w.strOmit("note", t.Note)
	w.b = append(w.b, '}')
}

func (w *jsonWriter) env(e *Env) {
	w.b = append(w.b, '{')
	w.str("id", e.ID)
	w.int("rev", e.Rev)
	w.str("state", string(e.State))
	w.time("created_at", e.CreatedAt)
	w.str("boot_id", e.BootID)
	w.str("purpose", e.Purpose)
	w.labels("labels", e.Labels)
	w.str("tier", string(e.Tier))
	w.strOmit("cgroup_path", e.CgroupPath)
	w.uintOmit("cgroup_inode", e.CgroupInode)
	w.str("run_dir", e.RunDir)
	w.str("owner_exit", e.OwnerExit)
	w.identity("owner", e.Owner)
	w.bool("until_stopped", e.UntilStopped)
	w.bool("auto_stop", e.AutoStop)
	w.duration("ttl", e.TTL)
	w.duration("grace", e.Grace)
	w.duration("idle_timeout", e.IdleTimeout)
	w.timePtr("activated_at", e.ActivatedAt)
	w.timePtr("deadline_at", e.DeadlineAt)
	w.rawOmit("spec", e.Spec)
	w.key("trees")
	if e.Trees == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, '[')
		for i := range e.Trees {
			w.sep()
			w.tree(&e.Trees[i])
		}
		w.b = append(w.b, ']')
	}
	w.identity("keeper", e.Keeper)
	w.rawOmit("view", e.View)
	w.rawOmit("limits", e.Limits)
	w.rawOmit("limit_evidence", e.LimitEvidence)
	w.strOmit("unit", e.Unit)
	w.strOmit("scope_membership", e.ScopeMembership)
	w.strOmit("manager_result", e.ManagerResult)
	w.str("stop_reason", string(e.StopReason))
	w.timePtr("stop_requested_at", e.StopRequestedAt)
	w.timePtr("stopped_at", e.StoppedAt)
	w.stringsOmit("abandoned", e.Abandoned)
	w.strings("cleanup_errors", e.CleanupErrors)
	w.str("error", e.Error)
	w.str("owner_alive", e.OwnerAlive)
	w.bool("expired", e.Expired)
	w.str("due", e.Due)
	w.rawOmit("limits_now", e.LimitsNow)
	w.key("commands")
	if e.Commands == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, '[')
		for i := range e.Commands {
			w.sep()
			w.command(&e.Commands[i])
		}
		w.b = append(w.b, ']')
	}
	w.b = append(w.b, '}')
}

func (w *jsonWriter) command(c *Command) {
	w.b = append(w.b, '{')
	w.str("id", c.ID)
	w.str("env", c.Env)
	w.int("rev", c.Rev)
	w.str("record_state", string(c.State))
	w.time("created_at", c.CreatedAt)
	w.str("purpose", c.Purpose)
	w.labels("labels", c.Labels)
	w.strings("argv", c.Argv)
	w.str("cwd", c.Cwd)
	w.str("output", string(c.Output))
	w.str("dir", c.Dir)
	w.str("stdout_path", c.StdoutPath)
	w.str("stderr_path", c.StderrPath)
	w.str("env_policy", c.EnvPolicy)
	w.strOmit("env_policy_note", c.EnvPolicyNote)
	w.strings("env_keys", c.EnvKeys)
	w.str("tier", string(c.Tier))
	w.identity("launcher", c.Launcher)
	w.strOmit("cgroup_path", c.CgroupPath)
	w.uintOmit("cgroup_inode", c.CgroupInode)
	w.identity("guardian", c.Guardian)
	w.uintOmit("proof_dev", c.ProofDev)
	w.uintOmit("proof_ino", c.ProofIno)
	w.identity("workload", c.Workload)
	w.timePtr("started_at", c.StartedAt)
	w.duration("timeout", c.Timeout)
	w.intPtr("exit_code", c.ExitCode)
	w.intPtr("signal", c.Signal)
	w.str("leader_state", string(c.LeaderState))
	w.timePtr("leader_exited_at", c.LeaderExitedAt)
	w.str("tree_state", string(c.TreeState))
	w.timePtr("tree_exited_at", c.TreeExitedAt)
	w.str("tree_evidence", c.TreeEvidence)
	w.str("stop_reason", string(c.StopReason))
	w.bool("stopped_by_hostfork", c.StoppedByHostfork)
	w.boolPtr("oom", c.OOM)
	w.str("oom_evidence", c.OOMEvidence)
	if len(c.Survivors) > 0 {
		w.key("survivors")
		w.b = append(w.b, '[')
		for i := range c.Survivors {
			w.sep()
			w.identityValue(&c.Survivors[i])
		}
		w.b = append(w.b, ']')
	}
	if c.OutputTruncated {
		w.bool("output_truncated", true)
	}
	w.strOmit("limits_note", c.LimitsNote)
	w.strOmit("workload_kind", c.WorkloadKind)
	w.strOmit("admission", c.Admission)
	w.key("capture")
	if c.Capture == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, '{')
		for _, name := range sortedKeys(c.Capture) {
			s := c.Capture[name]
			w.key(name)
			w.b = append(w.b, '{')
			w.str("state", s.State)
			w.int("bytes", s.Bytes)
			w.strOmit("error", s.Error)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, '}')
	}
	w.strings("cleanup_errors", c.CleanupErrors)
	w.str("error", c.Error)
	w.str("state", string(c.Liveness))
	w.bool("stoppable", c.Stoppable)
	w.intPtr("pid", c.PID)
	w.timePtr("deadline_at", c.DeadlineAt)
	w.b = append(w.b, '}')
}

// appendJSONString is encoding/json's string encoding without HTML
// escaping: '"', '\\' and control bytes escaped (\b \f \n \r \t by name),
// invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
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

// eachMember calls fn with each member of the object d, its key unquoted,
// and reports false if d is not an object or fn returned false.
func eachMember(d []byte, fn func(key string, val []byte) bool) bool {
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
		if !decodeString(d[i:end], &key) {
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

// eachElement calls fn with each element of the array d.
func eachElement(d []byte, fn func(val []byte) bool) bool {
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

// memberSet tracks the keys a struct decode has seen: a repeated key (which
// encoding/json merges) sends the document to encoding/json, and so does a
// key that matches a field only without regard to case.
type memberSet struct {
	names []string
	seen  uint64
}

// field returns the index of key among the names, or -1 for a key
// encoding/json would ignore; ok is false when the decoder must give up.
func (m *memberSet) field(key string) (int, bool) {
	for i, n := range m.names {
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
	for _, n := range m.names {
		if strings.EqualFold(n, key) {
			return -1, false
		}
	}
	return -1, true
}

func isNull(v []byte) bool { return string(v) == "null" }

// decodeString decodes a JSON string; null leaves s as it is.
func decodeString(v []byte, s *string) bool {
	if isNull(v) {
		return true
	}
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		*s = string(in)
		return true
	}
	return json.Unmarshal(v, s) == nil
}

func decodeInt(v []byte, n *int64) bool {
	if isNull(v) {
		return true
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	*n = x
	return err == nil
}

func decodeUint(v []byte, n *uint64) bool {
	if isNull(v) {
		return true
	}
	x, err := strconv.ParseUint(string(v), 10, 64)
	*n = x
	return err == nil
}

func decodeBool(v []byte, b *bool) bool {
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

func decodeTime(v []byte, t *time.Time) bool { return t.UnmarshalJSON(v) == nil }

func decodeTimePtr(v []byte, t **time.Time) bool {
	if isNull(v) {
		*t = nil
		return true
	}
	*t = new(time.Time)
	return decodeTime(v, *t)
}

func decodeDuration(v []byte, d *Duration) bool { return d.UnmarshalJSON(v) == nil }

// decodeRaw keeps the value's bytes, null included, as RawMessage does.
func decodeRaw(v []byte, m *json.RawMessage) bool {
	*m = append(json.RawMessage(nil), v...)
	return true
}

func decodeStrings(v []byte, l *[]string) bool {
	if isNull(v) {
		*l = nil
		return true
	}
	out := []string{}
	ok := eachElement(v, func(e []byte) bool {
		if isNull(e) {
			return false
		}
		var s string
		if !decodeString(e, &s) {
			return false
		}
		out = append(out, s)
		return true
	})
	*l = out
	return ok
}

func decodeLabels(v []byte, m *map[string]string) bool {
	if isNull(v) {
		*m = nil
		return true
	}
	out := map[string]string{}
	ok := eachMember(v, func(k string, e []byte) bool {
		if isNull(e) {
			return false
		}
		var s string
		if !decodeString(e, &s) {
			return false
		}
		out[k] = s
		return true
	})
	*m = out
	return ok
}

var identityNames = []string{"boot_id", "pid", "start_time"}

func decodeIdentity(v []byte, p **Identity) bool {
	if isNull(v) {
		*p = nil
		return true
	}
	var id Identity
	set := memberSet{names: identityNames}
	ok := eachMember(v, func(k string, e []byte) bool {
		i, ok := set.field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return decodeString(e, &id.BootID)
		case 1:
			var n int64
			ok := decodeInt(e, &n)
			id.PID = int(n)
			return ok
		case 2:
			return decodeUint(e, &id.StartTime)
		}
		return true
	})
	*p = &id
	return ok
}

var treeNames = []string{"name", "kind", "baseline", "source", "host_path", "workload_path", "storage", "state", "note"}

func decodeTrees(v []byte, l *[]Tree) bool {
	if isNull(v) {
		*l = nil
		return true
	}
	out := []Tree{}
	ok := eachElement(v, func(e []byte) bool {
		if isNull(e) {
			return false
		}
		var t Tree
		set := memberSet{names: treeNames}
		ok := eachMember(e, func(k string, f []byte) bool {
			i, ok := set.field(k)
			if !ok {
				return false
			}
			switch i {
			case 0:
				return decodeString(f, &t.Name)
			case 1:
				return decodeString(f, &t.Kind)
			case 2:
				return decodeString(f, &t.Baseline)
			case 3:
				return decodeString(f, &t.Source)
			case 4:
				return decodeString(f, &t.HostPath)
			case 5:
				return decodeString(f, &t.WorkloadPath)
			case 6:
				return decodeRaw(f, &t.Storage)
			case 7:
				return decodeString(f, &t.State)
			case 8:
				return decodeString(f, &t.Note)
			}
			return true
		})
		out = append(out, t)
		return ok
	})
	*l = out
	return ok
}

var envNames = []string{
	"id", "rev", "state", "created_at", "boot_id", "purpose", "labels", "tier", "cgroup_path", "cgroup_inode",
	"run_dir", "owner_exit", "owner", "until_stopped", "auto_stop", "ttl", "grace", "idle_timeout", "activated_at", "deadline_at",
	"spec", "trees", "keeper", "view", "limits", "limit_evidence", "unit", "scope_membership", "manager_result", "stop_reason",
	"stop_requested_at", "stopped_at", "abandoned", "cleanup_errors", "error", "owner_alive", "expired", "due", "limits_now", "commands",
}

// decodeEnv decodes a canonical environment document into the empty e.
func decodeEnv(d []byte, e *Env) bool {
	set := memberSet{names: envNames}
	str := func(v []byte, s *string) bool { return decodeString(v, s) }
	return eachMember(d, func(k string, v []byte) bool {
		i, ok := set.field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return str(v, &e.ID)
		case 1:
			return decodeInt(v, &e.Rev)
		case 2:
			return str(v, (*string)(&e.State))
		case 3:
			return decodeTime(v, &e.CreatedAt)
		case 4:
			return str(v, &e.BootID)
		case 5:
			return str(v, &e.Purpose)
		case 6:
			return decodeLabels(v, &e.Labels)
		case 7:
			return str(v, (*string)(&e.Tier))
		case 8:
			return str(v, &e.CgroupPath)
		case 9:
			return decodeUint(v, &e.CgroupInode)
		case 10:
			return str(v, &e.RunDir)
		case 11:
			return str(v, &e.OwnerExit)
		case 12:
			return decodeIdentity(v, &e.Owner)
		case 13:
			return decodeBool(v, &e.UntilStopped)
		case 14:
			return decodeBool(v, &e.AutoStop)
		case 15:
			return decodeDuration(v, &e.TTL)
		case 16:
			return decodeDuration(v, &e.Grace)
		case 17:
			return decodeDuration(v, &e.IdleTimeout)
		case 18:
			return decodeTimePtr(v, &e.ActivatedAt)
		case 19:
			return decodeTimePtr(v, &e.DeadlineAt)
		case 20:
			return decodeRaw(v, &e.Spec)
		case 21:
			return decodeTrees(v, &e.Trees)
		case 22:
			return decodeIdentity(v, &e.Keeper)
		case 23:
			return decodeRaw(v, &e.View)
		case 24:
			return decodeRaw(v, &e.Limits)
		case 25:
			return decodeRaw(v, &e.LimitEvidence)
		case 26:
			return str(v, &e.Unit)
		case 27:
			return str(v, &e.ScopeMembership)
		case 28:
			return str(v, &e.ManagerResult)
		case 29:
			return str(v, (*string)(&e.StopReason))
		case 30:
			return decodeTimePtr(v, &e.StopRequestedAt)
		case 31:
			return decodeTimePtr(v, &e.StoppedAt)
		case 32:
			return decodeStrings(v, &e.Abandoned)
		case 33:
			return decodeStrings(v, &e.CleanupErrors)
		case 34:
			return str(v, &e.Error)
		case 35:
			return str(v, &e.OwnerAlive)
		case 36:
			return decodeBool(v, &e.Expired)
		case 37:
			return str(v, &e.Due)
		case 38:
			return decodeRaw(v, &e.LimitsNow)
		case 39:
			// Commands: encoding/json's own decoder (not on any hot path).
			if isNull(v) {
				return true
			}
			var l []Command
			if json.Unmarshal(v, &l) != nil {
				return false
			}
			e.Commands = l
			return true
		}
		return true
	})
}
