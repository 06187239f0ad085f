package hostfork

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Manifest is the readable snapshot of one environment's registry state,
// written to runs/<id>/manifest.json when the environment itself changes
// (created, stopped, failed). Each command's own snapshot is
// runs/<id>/commands/<cid>/record.json, written when that command changes,
// so a busy environment doesn't rewrite every record per command. The
// registry stays the authority.
type Manifest struct {
	Env      *registry.Env       `json:"env"`
	Commands []*registry.Command `json:"commands"`
}

// writeManifest rewrites runs/<id>/manifest.json from the registry
// (temporary file + rename). Failures are ignored: the manifest is a
// convenience copy, never a second writer.
func (h *Host) writeManifest(ctx context.Context, envID string) {
	env, err := h.reg.Env(ctx, envID)
	if err != nil {
		return
	}
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{EnvID: envID})
	if err != nil {
		return
	}
	writeJSONAtomic(filepath.Join(env.RunDir, "manifest.json"), Manifest{Env: env, Commands: cmds})
}

// writeCommandRecord rewrites runs/<env>/commands/<cid>/record.json.
func writeCommandRecord(c *registry.Command) {
	if c == nil || c.Dir == "" {
		return
	}
	writeJSONAtomic(filepath.Join(c.Dir, "record.json"), c)
}

// writeJSONAtomic writes v as indented JSON through a temporary file and a
// rename; failures are ignored (these are convenience copies).
func writeJSONAtomic(dst string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".record-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), dst) != nil {
		os.Remove(tmp.Name())
	}
}
