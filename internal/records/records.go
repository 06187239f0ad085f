package records

import (
	"context"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Records is the registry as the engine reads it: every record's
// directories are the store's own layout, derived from its ids, whatever
// the row says. A row edited to name another directory (or an id that is
// not one hostfork makes) can't make the engine write, lock or delete
// anything outside <root>/runs (DESIGN.md, "Trust model").
type Records struct {
	*registry.DB
	root string
	runs string // filepath.Join(root, "runs"), once
}

func New(db *registry.DB, root string) *Records {
	return &Records{DB: db, root: root, runs: filepath.Join(root, "runs")}
}

func (r *Records) Env(ctx context.Context, id string) (*api.Env, error) {
	env, err := r.DB.Env(ctx, id)
	if env != nil {
		r.pinEnv(env)
	}
	return env, err
}

func (r *Records) Envs(ctx context.Context, q registry.EnvQuery) ([]*api.Env, error) {
	envs, err := r.DB.Envs(ctx, q)
	for _, env := range envs {
		r.pinEnv(env)
	}
	return envs, err
}

func (r *Records) Command(ctx context.Context, id string) (*api.Command, error) {
	c, err := r.DB.Command(ctx, id)
	if c != nil {
		r.pinCommand(c)
	}
	return c, err
}

func (r *Records) Commands(ctx context.Context, q registry.CommandQuery) ([]*api.Command, error) {
	cmds, err := r.DB.Commands(ctx, q)
	for _, c := range cmds {
		r.pinCommand(c)
	}
	return cmds, err
}

// runDir is an environment's run directory; an id hostfork would never
// make names a path that does not exist.
func (r *Records) runDir(envID string) string {
	if !validID(envID) {
		return r.runs + "/.invalid-id"
	}
	return r.runs + "/" + envID
}

func (r *Records) pinEnv(env *api.Env) {
	env.RunDir = r.runDir(env.ID)
}

func (r *Records) pinCommand(c *api.Command) {
	// Joined by hand: runDir is clean and a valid id has no separator, so
	// this is filepath.Join without its Clean, which a listing of 10,000
	// commands would pay three times each.
	var dir string
	if validID(c.ID) {
		dir = r.runDir(c.Env) + "/commands/" + c.ID
	} else {
		dir = r.runDir("") + "/commands/.invalid-id"
	}
	c.Dir = dir
	if c.StdoutPath != "" {
		c.StdoutPath = dir + "/stdout"
	}
	if c.StderrPath != "" {
		c.StderrPath = dir + "/stderr"
	}
}

// validID reports whether id is one newID could have made.
func validID(id string) bool {
	if len(id) != 10 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !(id[i] >= '0' && id[i] <= '9' || id[i] >= 'a' && id[i] <= 'v') {
			return false
		}
	}
	return true
}
