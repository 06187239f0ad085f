package records

import (
	"encoding/json"
	"errors"
	"os"
	"syscall"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// PathIdentity is the identity record of a directory or file: its path,
// device and inode.
func PathIdentity(p string) string {
	st, err := os.Lstat(p)
	if err != nil {
		return ""
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	b, _ := json.Marshal(map[string]any{"path": p, "dev": s.Dev, "inode": s.Ino})
	return string(b)
}

// RecordedInode reads the inode (and device, when recorded) of an
// intent's identity record.
func RecordedInode(identity string) (dev, ino uint64, ok bool) {
	var id struct {
		Dev   *uint64 `json:"dev"`
		Inode uint64  `json:"inode"`
	}
	if json.Unmarshal([]byte(identity), &id) != nil || id.Inode == 0 {
		return 0, 0, false
	}
	if id.Dev != nil {
		dev = *id.Dev
	}
	return dev, id.Inode, true
}

// factOf observes an intent's target before a batch settles it: whether
// it exists (for a created intent with a recorded inode: whether it is
// still that inode), and its identity. Systemd scopes are not files; their
// facts come from the manager (the caller passes them).
func factOf(in registry.Intent) registry.Fact {
	st, err := os.Lstat(in.Target)
	if errors.Is(err, os.ErrNotExist) {
		return registry.Fact{Exists: false}
	}
	if err != nil {
		// Can't tell: it stays as it is.
		return registry.Fact{Exists: in.State == registry.IntentCreated || in.State == registry.IntentPending}
	}
	if in.State == registry.IntentCreated {
		if dev, ino, ok := RecordedInode(in.Identity); ok {
			s := st.Sys().(*syscall.Stat_t)
			if s.Ino != ino || (dev != 0 && s.Dev != dev) {
				// Something else is there now: the recorded resource
				// is gone.
				return registry.Fact{Exists: false, Error: "the path now holds another file than the one recorded"}
			}
		}
	}
	f := registry.Fact{Exists: true}
	switch in.Kind {
	case registry.KindDir:
		f.Identity = PathIdentity(in.Target)
	case registry.KindCgroup:
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			b, _ := json.Marshal(map[string]any{"inode": s.Ino})
			f.Identity = string(b)
		}
	}
	return f
}

// SettleAll adds to b the settlement of every intent, observed now.
func SettleAll(b *registry.Batch, ins []*registry.Intent, override map[int64]registry.Fact) {
	for _, in := range ins {
		if in == nil || in.ID == 0 {
			continue
		}
		f, ok := override[in.ID]
		if !ok {
			if in.Kind == registry.KindTree && in.State == registry.IntentPending {
				// A tree's identity is its storage record, known only to
				// who made it: an existing path is not enough. Left
				// pending, the reaper removes it as an unrecorded
				// allocation.
				if _, err := os.Lstat(in.Target); err == nil {
					continue
				}
			}
			f = factOf(*in)
		}
		b.SettleIntent(in.ID, f)
	}
}

func ToLinux(id *api.Identity) linux.Identity {
	if id == nil {
		return linux.Identity{}
	}
	return linux.Identity{BootID: id.BootID, PID: id.PID, StartTime: id.StartTime}
}

func ToAPI(id linux.Identity) *api.Identity {
	if !id.Valid() {
		return nil
	}
	return &api.Identity{BootID: id.BootID, PID: id.PID, StartTime: id.StartTime}
}

// Liveness is a recorded process's liveness, in decide's terms.
func Liveness(id *api.Identity) decide.Liveness {
	if id == nil {
		return decide.Unverified
	}
	switch linux.Assess(ToLinux(id)) {
	case linux.Alive:
		return decide.Alive
	case linux.Gone:
		return decide.Gone
	}
	return decide.Unverified
}

func LivenessText(l decide.Liveness) string {
	switch l {
	case decide.Alive:
		return "alive"
	case decide.Gone:
		return "gone"
	}
	return "unverified"
}

// Ptrs points at each intent of ins.
func Ptrs(ins []registry.Intent) []*registry.Intent {
	out := make([]*registry.Intent, len(ins))
	for i := range ins {
		out[i] = &ins[i]
	}
	return out
}
