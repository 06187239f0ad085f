package spec

import (
	"strconv"
	"time"

	"github.com/habemus-papadum/hostfork/internal/jsonfast"
)

// MarshalJSON encodes the request as encoding/json does, without its
// reflection: the request is written into every environment's record, once
// per process (docs/decisions.md, 63). codec_test.go compares the two over
// random requests.
func (e Environment) MarshalJSON() ([]byte, error) {
	var w jsonfast.Writer
	w.Begin('{')
	w.StrOmit("purpose", e.Purpose)
	if len(e.Labels) > 0 {
		w.StringMap("labels", e.Labels)
	}
	l := &e.Lifetime
	w.Key("lifetime")
	w.Begin('{')
	durationOmit(&w, "max_runtime", l.MaxRuntime)
	if l.UntilStopped {
		w.Bool("until_stopped", true)
	}
	durationOmit(&w, "grace", l.Grace)
	w.StrOmit("owner_exit", l.OwnerExit)
	durationOmit(&w, "idle_timeout", l.IdleTimeout)
	w.End('}')
	w.StrOmit("tier", e.Tier)
	if len(e.Trees) > 0 {
		w.Key("trees")
		w.Begin('{')
		for _, name := range jsonfast.SortedKeys(e.Trees) {
			t := e.Trees[name]
			w.Key(name)
			w.Begin('{')
			w.Str("kind", t.Kind)
			w.StrOmit("baseline", t.Baseline)
			w.StrOmit("source", t.Source)
			w.End('}')
		}
		w.End('}')
	}
	v := &e.View
	w.Key("view")
	w.Begin('{')
	if len(v.Replace) > 0 {
		w.StringMap("replace", v.Replace)
	}
	w.StringsOmit("read_only", v.ReadOnly)
	w.StringsOmit("share", v.Share)
	w.StringsOmit("scratch", v.Scratch)
	w.End('}')
	lim := &e.Limits
	w.Key("limits")
	w.Begin('{')
	if lim.Memory != 0 {
		w.Str("memory", strconv.FormatInt(int64(lim.Memory), 10))
	}
	if lim.CPUs != 0 {
		w.Float("cpus", lim.CPUs)
	}
	if lim.Pids != 0 {
		w.Int("pids", lim.Pids)
	}
	if lim.AllowWeaker {
		w.Bool("allow_weaker", true)
	}
	w.End('}')
	w.Key("retention")
	w.Begin('{')
	if r := e.Retention.Trees; r != nil {
		w.Duration("trees", time.Duration(*r))
	}
	if r := e.Retention.Evidence; r != nil {
		w.Duration("evidence", time.Duration(*r))
	}
	w.End('}')
	w.StrOmit("env_policy", e.EnvPolicy)
	if len(e.Env) > 0 {
		w.StringMap("env", e.Env)
	}
	w.End('}')
	return w.Result()
}

func durationOmit(w *jsonfast.Writer, k string, d Duration) {
	if d != 0 {
		w.Duration(k, time.Duration(d))
	}
}
