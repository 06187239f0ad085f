package engine

import (
	"sync"

	"github.com/habemus-papadum/hostfork/internal/supervise"
)

// owners holds the owner channels of the keepers this process created, for
// the life of the process: the channel's EOF is what tells a keeper that
// its owner exited (owner-exit stop). Keeping them here, not only in
// handles a caller may drop, means dropping a Host or an Env never looks
// like the owner's exit to a keeper (a collected *os.File would close).
var owners struct {
	sync.Mutex
	keepers []*supervise.Keeper
}

func holdOwner(k *supervise.Keeper) {
	owners.Lock()
	owners.keepers = append(owners.keepers, k)
	owners.Unlock()
}
