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
	"reflect"
	"time"

	"github.com/habemus-papadum/hostfork/internal/jsonfast"
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
	var w jsonfast.Writer
	writeEnv(&w, &e)
	return w.Result()
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
	var w jsonfast.Writer
	writeCommand(&w, &c)
	return w.Result()
}

// isZeroEnv reports whether e holds nothing a decode could merge into.
func isZeroEnv(e *Env) bool { return reflect.ValueOf(e).Elem().IsZero() }

func writeIdentity(w *jsonfast.Writer, k string, id *Identity) {
	w.Key(k)
	if id == nil {
		w.Null()
		return
	}
	writeIdentityValue(w, id)
}

func writeIdentityValue(w *jsonfast.Writer, id *Identity) {
	w.Begin('{')
	w.Str("boot_id", id.BootID)
	w.Int("pid", int64(id.PID))
	w.Uint("start_time", id.StartTime)
	w.End('}')
}

func writeTree(w *jsonfast.Writer, t *Tree) {
	w.Begin('{')
	w.Str("name", t.Name)
	w.Str("kind", t.Kind)
	w.StrOmit("baseline", t.Baseline)
	w.Str("source", t.Source)
	w.Str("host_path", t.HostPath)
	w.Str("workload_path", t.WorkloadPath)
	w.RawOmit("storage", t.Storage)
	w.Str("state", t.State)
	w.StrOmit("note", t.Note)
	w.End('}')
}

func writeEnv(w *jsonfast.Writer, e *Env) {
	w.Begin('{')
	w.Str("id", e.ID)
	w.Int("rev", e.Rev)
	w.Str("state", string(e.State))
	w.Time("created_at", e.CreatedAt)
	w.Str("boot_id", e.BootID)
	w.Str("purpose", e.Purpose)
	w.StringMap("labels", e.Labels)
	w.Str("tier", string(e.Tier))
	w.StrOmit("cgroup_path", e.CgroupPath)
	w.UintOmit("cgroup_inode", e.CgroupInode)
	w.Str("run_dir", e.RunDir)
	w.Str("owner_exit", e.OwnerExit)
	writeIdentity(w, "owner", e.Owner)
	w.Bool("until_stopped", e.UntilStopped)
	w.Bool("auto_stop", e.AutoStop)
	w.Duration("ttl", time.Duration(e.TTL))
	w.Duration("grace", time.Duration(e.Grace))
	w.Duration("idle_timeout", time.Duration(e.IdleTimeout))
	w.TimePtr("activated_at", e.ActivatedAt)
	w.TimePtr("deadline_at", e.DeadlineAt)
	w.RawOmit("spec", e.Spec)
	w.Key("trees")
	if e.Trees == nil {
		w.Null()
	} else {
		w.Begin('[')
		for i := range e.Trees {
			w.Sep()
			writeTree(w, &e.Trees[i])
		}
		w.End(']')
	}
	writeIdentity(w, "keeper", e.Keeper)
	w.RawOmit("view", e.View)
	w.RawOmit("limits", e.Limits)
	w.RawOmit("limit_evidence", e.LimitEvidence)
	w.StrOmit("unit", e.Unit)
	w.StrOmit("scope_membership", e.ScopeMembership)
	w.StrOmit("manager_result", e.ManagerResult)
	w.Str("stop_reason", string(e.StopReason))
	w.TimePtr("stop_requested_at", e.StopRequestedAt)
	w.TimePtr("stopped_at", e.StoppedAt)
	w.StringsOmit("abandoned", e.Abandoned)
	w.Strings("cleanup_errors", e.CleanupErrors)
	w.Str("error", e.Error)
	w.Str("owner_alive", e.OwnerAlive)
	w.Bool("expired", e.Expired)
	w.Str("due", e.Due)
	w.RawOmit("limits_now", e.LimitsNow)
	w.Key("commands")
	if e.Commands == nil {
		w.Null()
	} else {
		w.Begin('[')
		for i := range e.Commands {
			w.Sep()
			writeCommand(w, &e.Commands[i])
		}
		w.End(']')
	}
	w.End('}')
}

func writeCommand(w *jsonfast.Writer, c *Command) {
	w.Begin('{')
	w.Str("id", c.ID)
	w.Str("env", c.Env)
	w.Int("rev", c.Rev)
	w.Str("record_state", string(c.State))
	w.Time("created_at", c.CreatedAt)
	w.Str("purpose", c.Purpose)
	w.StringMap("labels", c.Labels)
	w.Strings("argv", c.Argv)
	w.Str("cwd", c.Cwd)
	w.Str("output", string(c.Output))
	w.Str("dir", c.Dir)
	w.Str("stdout_path", c.StdoutPath)
	w.Str("stderr_path", c.StderrPath)
	w.Str("env_policy", c.EnvPolicy)
	w.StrOmit("env_policy_note", c.EnvPolicyNote)
	w.Strings("env_keys", c.EnvKeys)
	w.Str("tier", string(c.Tier))
	writeIdentity(w, "launcher", c.Launcher)
	w.StrOmit("cgroup_path", c.CgroupPath)
	w.UintOmit("cgroup_inode", c.CgroupInode)
	writeIdentity(w, "guardian", c.Guardian)
	w.UintOmit("proof_dev", c.ProofDev)
	w.UintOmit("proof_ino", c.ProofIno)
	writeIdentity(w, "workload", c.Workload)
	w.TimePtr("started_at", c.StartedAt)
	w.Duration("timeout", time.Duration(c.Timeout))
	w.IntPtr("exit_code", c.ExitCode)
	w.IntPtr("signal", c.Signal)
	w.Str("leader_state", string(c.LeaderState))
	w.TimePtr("leader_exited_at", c.LeaderExitedAt)
	w.Str("tree_state", string(c.TreeState))
	w.TimePtr("tree_exited_at", c.TreeExitedAt)
	w.Str("tree_evidence", c.TreeEvidence)
	w.Str("stop_reason", string(c.StopReason))
	w.Bool("stopped_by_hostfork", c.StoppedByHostfork)
	w.BoolPtr("oom", c.OOM)
	w.Str("oom_evidence", c.OOMEvidence)
	if len(c.Survivors) > 0 {
		w.Key("survivors")
		w.Begin('[')
		for i := range c.Survivors {
			w.Sep()
			writeIdentityValue(w, &c.Survivors[i])
		}
		w.End(']')
	}
	if c.OutputTruncated {
		w.Bool("output_truncated", true)
	}
	w.StrOmit("limits_note", c.LimitsNote)
	w.StrOmit("workload_kind", c.WorkloadKind)
	w.StrOmit("admission", c.Admission)
	w.Key("capture")
	if c.Capture == nil {
		w.Null()
	} else {
		w.Begin('{')
		for _, name := range jsonfast.SortedKeys(c.Capture) {
			s := c.Capture[name]
			w.Key(name)
			w.Begin('{')
			w.Str("state", s.State)
			w.Int("bytes", s.Bytes)
			w.StrOmit("error", s.Error)
			w.End('}')
		}
		w.End('}')
	}
	w.Strings("cleanup_errors", c.CleanupErrors)
	w.Str("error", c.Error)
	w.Str("state", string(c.Liveness))
	w.Bool("stoppable", c.Stoppable)
	w.IntPtr("pid", c.PID)
	w.TimePtr("deadline_at", c.DeadlineAt)
	w.End('}')
}

func decodeDuration(v []byte, d *Duration) bool { return d.UnmarshalJSON(v) == nil }

var identityNames = []string{"boot_id", "pid", "start_time"}

func decodeIdentity(v []byte, p **Identity) bool {
	if jsonfast.IsNull(v) {
		*p = nil
		return true
	}
	var id Identity
	set := jsonfast.Fields{Names: identityNames}
	ok := jsonfast.EachMember(v, func(k string, e []byte) bool {
		i, ok := set.Field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return jsonfast.DecodeString(e, &id.BootID)
		case 1:
			return jsonfast.DecodeIntValue(e, &id.PID)
		case 2:
			return jsonfast.DecodeUint(e, &id.StartTime)
		}
		return true
	})
	*p = &id
	return ok
}

var treeNames = []string{"name", "kind", "baseline", "source", "host_path", "workload_path", "storage", "state", "note"}

func decodeTrees(v []byte, l *[]Tree) bool {
	if jsonfast.IsNull(v) {
		*l = nil
		return true
	}
	out := []Tree{}
	ok := jsonfast.EachElement(v, func(e []byte) bool {
		if jsonfast.IsNull(e) {
			return false
		}
		var t Tree
		set := jsonfast.Fields{Names: treeNames}
		ok := jsonfast.EachMember(e, func(k string, f []byte) bool {
			i, ok := set.Field(k)
			if !ok {
				return false
			}
			switch i {
			case 0:
				return jsonfast.DecodeString(f, &t.Name)
			case 1:
				return jsonfast.DecodeString(f, &t.Kind)
			case 2:
				return jsonfast.DecodeString(f, &t.Baseline)
			case 3:
				return jsonfast.DecodeString(f, &t.Source)
			case 4:
				return jsonfast.DecodeString(f, &t.HostPath)
			case 5:
				return jsonfast.DecodeString(f, &t.WorkloadPath)
			case 6:
				return jsonfast.DecodeRaw(f, &t.Storage)
			case 7:
				return jsonfast.DecodeString(f, &t.State)
			case 8:
				return jsonfast.DecodeString(f, &t.Note)
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
	set := jsonfast.Fields{Names: envNames}
	str := func(v []byte, s *string) bool { return jsonfast.DecodeString(v, s) }
	return jsonfast.EachMember(d, func(k string, v []byte) bool {
		i, ok := set.Field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return str(v, &e.ID)
		case 1:
			return jsonfast.DecodeInt(v, &e.Rev)
		case 2:
			return str(v, (*string)(&e.State))
		case 3:
			return jsonfast.DecodeTime(v, &e.CreatedAt)
		case 4:
			return str(v, &e.BootID)
		case 5:
			return str(v, &e.Purpose)
		case 6:
			return jsonfast.DecodeStringMap(v, &e.Labels)
		case 7:
			return str(v, (*string)(&e.Tier))
		case 8:
			return str(v, &e.CgroupPath)
		case 9:
			return jsonfast.DecodeUint(v, &e.CgroupInode)
		case 10:
			return str(v, &e.RunDir)
		case 11:
			return str(v, &e.OwnerExit)
		case 12:
			return decodeIdentity(v, &e.Owner)
		case 13:
			return jsonfast.DecodeBool(v, &e.UntilStopped)
		case 14:
			return jsonfast.DecodeBool(v, &e.AutoStop)
		case 15:
			return decodeDuration(v, &e.TTL)
		case 16:
			return decodeDuration(v, &e.Grace)
		case 17:
			return decodeDuration(v, &e.IdleTimeout)
		case 18:
			return jsonfast.DecodeTimePtr(v, &e.ActivatedAt)
		case 19:
			return jsonfast.DecodeTimePtr(v, &e.DeadlineAt)
		case 20:
			return jsonfast.DecodeRaw(v, &e.Spec)
		case 21:
			return decodeTrees(v, &e.Trees)
		case 22:
			return decodeIdentity(v, &e.Keeper)
		case 23:
			return jsonfast.DecodeRaw(v, &e.View)
		case 24:
			return jsonfast.DecodeRaw(v, &e.Limits)
		case 25:
			return jsonfast.DecodeRaw(v, &e.LimitEvidence)
		case 26:
			return str(v, &e.Unit)
		case 27:
			return str(v, &e.ScopeMembership)
		case 28:
			return str(v, &e.ManagerResult)
		case 29:
			return str(v, (*string)(&e.StopReason))
		case 30:
			return jsonfast.DecodeTimePtr(v, &e.StopRequestedAt)
		case 31:
			return jsonfast.DecodeTimePtr(v, &e.StoppedAt)
		case 32:
			return jsonfast.DecodeStrings(v, &e.Abandoned)
		case 33:
			return jsonfast.DecodeStrings(v, &e.CleanupErrors)
		case 34:
			return str(v, &e.Error)
		case 35:
			return str(v, &e.OwnerAlive)
		case 36:
			return jsonfast.DecodeBool(v, &e.Expired)
		case 37:
			return str(v, &e.Due)
		case 38:
			return jsonfast.DecodeRaw(v, &e.LimitsNow)
		case 39:
			// Commands: encoding/json's own decoder (not on any hot path).
			if jsonfast.IsNull(v) {
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
