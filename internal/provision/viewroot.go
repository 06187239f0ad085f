package provision

import (
	"context"
	"errors"
	"fmt"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// ViewRoot opens the root of environment id's view, in which its files
// are read and written (Env.ReadFile and the others): the keeper's
// /proc/PID/root, opened through a pidfd verified against the recorded
// keeper, for an environment with a view, which must be active (the view
// lives as long as the keeper); the host's "/" for one without. Paths are
// then resolved with safefs.Root's rules, with the caller's rights, which
// are the environment's user's: the store's owner runs its commands.
func ViewRoot(ctx context.Context, reg *records.Records, id string) (*safefs.Root, error) {
	env, err := reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	if env.Keeper == nil {
		return safefs.OpenRoot("/")
	}
	gone := func() error {
		where := ""
		for _, t := range env.Trees {
			where += fmt.Sprintf("; tree %s is at %s", t.Name, t.HostPath)
		}
		return fmt.Errorf("environment %s is %s and its view is gone (its files stay: hostfork export, or read the trees on the host%s): %w", id, env.State, where, api.ErrEnvNotActive)
	}
	if env.State != api.EnvActive {
		return nil, gone()
	}
	r, err := KeeperRoot(env.Keeper)
	if errors.Is(err, linux.ErrNoProcess) || errors.Is(err, linux.ErrIdentityMismatch) {
		return nil, gone()
	}
	if err != nil {
		return nil, fmt.Errorf("opening the view of %s: %w", id, err)
	}
	return r, nil
}

// KeeperRoot opens the root of the keeper's mount namespace, the view:
// its /proc/PID/root, through a pidfd verified against the recorded
// identity and checked alive after the open (linux.Pidfd.OpenRoot).
func KeeperRoot(id *api.Identity) (*safefs.Root, error) {
	p, err := linux.OpenVerified(records.ToLinux(id))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	f, err := p.OpenRoot()
	if err != nil {
		return nil, err
	}
	return safefs.NewRoot(f, f.Name())
}
