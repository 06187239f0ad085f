package engine

import (
	"context"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/api"
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

// writeManifest rewrites runs/<id>/manifest.json from the registry
// (temporary file + rename). Failures are ignored: the manifest is a
// readable copy, never a second writer.
func (e *Engine) writeManifest(ctx context.Context, envID string) {
	env, err := e.reg.Env(ctx, envID)
	if err != nil {
		return
	}
	cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: envID})
	if err != nil {
		return
	}
	r := RedactEnv(*env)
	writeJSONAtomic(filepath.Join(env.RunDir, "manifest.json"), Manifest{Env: &r, Commands: cmds})
}

// writeCommandRecord rewrites runs/<env>/commands/<cid>/record.json.
func writeCommandRecord(c *api.Command) {
	if c == nil || c.Dir == "" {
		return
	}
	writeJSONAtomic(filepath.Join(c.Dir, "record.json"), c)
}
