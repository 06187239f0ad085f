package hostfork

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Manifest is the readable snapshot of one environment's registry state,
// written to runs/<id>/manifest.json. The registry stays the authority.
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
	b, err := json.MarshalIndent(Manifest{Env: env, Commands: cmds}, "", "  ")
	if err != nil {
		return
	}
	dst := filepath.Join(env.RunDir, "manifest.json")
	tmp, err := os.CreateTemp(env.RunDir, ".manifest-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), dst) != nil {
		os.Remove(tmp.Name())
	}
}
