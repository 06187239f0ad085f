package engine

import (
	"encoding/json"

	"github.com/habemus-papadum/hostfork/internal/jsonfast"
	"github.com/habemus-papadum/hostfork/spec"
)

// A stored request (api.Env.Spec) is read for two of its parts at every
// launch: the launch environment and whether weaker limits were accepted.
// Both are read here without encoding/json's reflection (decision 63);
// a document these readers do not take is decoded by encoding/json, as
// before.

// launchOf is the launch part (env_policy, env) of a stored request.
func launchOf(raw json.RawMessage) spec.Launch {
	var l spec.Launch
	if len(raw) == 0 {
		return l
	}
	if json.Valid(raw) {
		set := jsonfast.Fields{Names: []string{"env_policy", "env"}}
		if jsonfast.EachMember(raw, func(k string, v []byte) bool {
			i, ok := set.Field(k)
			switch {
			case !ok:
				return false
			case i == 0:
				return jsonfast.DecodeString(v, &l.EnvPolicy)
			case i == 1:
				return jsonfast.DecodeStringMap(v, &l.Env)
			}
			return true
		}) {
			return l
		}
	}
	var full struct{ spec.Launch }
	_ = json.Unmarshal(raw, &full) // as before: what decodes is used
	return full.Launch
}

// acceptsWeaker reports whether a stored request's limits say
// allow_weaker. decided is false when the fast reader can't tell: the
// caller then decodes the request whole.
func acceptsWeaker(raw json.RawMessage) (allow, decided bool) {
	if len(raw) == 0 || !json.Valid(raw) {
		return false, false
	}
	top := jsonfast.Fields{Names: []string{"limits"}}
	ok := jsonfast.EachMember(raw, func(k string, v []byte) bool {
		i, ok := top.Field(k)
		if !ok || i != 0 || jsonfast.IsNull(v) {
			return ok
		}
		inner := jsonfast.Fields{Names: []string{"memory", "cpus", "pids", "allow_weaker"}}
		return jsonfast.EachMember(v, func(k string, v []byte) bool {
			j, ok := inner.Field(k)
			if ok && j == 3 {
				return jsonfast.DecodeBool(v, &allow)
			}
			return ok
		})
	})
	return allow, ok
}
