package records

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/atomicfile"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Manifest is the readable snapshot of one environment's registry state,
// written to runs/<id>/manifest.json when the environment itself changes
// (created, stopped, failed, its trees deleted). Each command's own
// snapshot is runs/<id>/commands/<cid>/record.json, written when that
// command's record is final. The registry stays the authority; explicit
// environment variable values are redacted in both.
type Manifest struct {
	Env      *api.Env       `json:"env"`
	Commands []*api.Command `json:"commands"`
}

// WriteManifest rewrites runs/<id>/manifest.json from the registry
// (temporary file + rename). Failures are ignored: the manifest is a
// readable copy, never a second writer.
func (reg *Records) WriteManifest(ctx context.Context, envID string) {
	env, err := reg.Env(ctx, envID)
	if err != nil {
		return
	}
	cmds, err := reg.Commands(ctx, registry.CommandQuery{Env: envID})
	if err != nil {
		return
	}
	r := RedactEnv(*env)
	WriteJSON(filepath.Join(env.RunDir, "manifest.json"), Manifest{Env: &r, Commands: cmds})
}

// WriteCommandRecord rewrites runs/<env>/commands/<cid>/record.json.
func WriteCommandRecord(c *api.Command) {
	if c == nil || c.Dir == "" {
		return
	}
	WriteJSON(filepath.Join(c.Dir, "record.json"), c)
}

// WriteJSON writes v as indented JSON, atomically (atomicfile.Replace,
// mode 0600); failures are ignored: these are readable copies of what the
// registry holds durably (manifests, command records, export records).
func WriteJSON(dst string, v any) {
	if b, err := json.MarshalIndent(v, "", "  "); err == nil {
		_ = atomicfile.Replace(dst, append(b, '\n'), 0o600)
	}
}
