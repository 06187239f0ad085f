package records

import (
	"encoding/json"

	"github.com/habemus-papadum/hostfork/api"
)

// Redacted stands for an explicit environment variable's value in
// readable output.
const Redacted = "<redacted>"

// RedactEnv returns env with the values of the spec's explicit
// environment variables replaced by Redacted: they may be secrets (an API
// token), and listings, status output and manifests are read by more eyes
// than the registry (mode 0600). --show-env asks for them.
func RedactEnv(env api.Env) api.Env {
	if len(env.Spec) == 0 {
		return env
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(env.Spec, &m) != nil {
		return env
	}
	raw, ok := m["env"]
	if !ok {
		return env
	}
	var vars map[string]string
	if json.Unmarshal(raw, &vars) != nil || len(vars) == 0 {
		return env
	}
	for k := range vars {
		vars[k] = Redacted
	}
	m["env"], _ = json.Marshal(vars)
	b, err := json.Marshal(m)
	if err != nil {
		return env
	}
	env.Spec = b
	return env
}
