package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/supervise"
)

// Op kinds, applied in the order given.
const (
	OpBind     = "bind"     // bind Source onto Target
	OpOverlay  = "overlay"  // mount overlay (Lower, Upper, Work) on Target
	OpTmpfs    = "tmpfs"    // private empty tmpfs on Target
	OpReadOnly = "readonly" // make Target (recursively) read-only
	// OpReadOnlyMount makes the one host mount at Target read-only, not
	// the mounts below it (read_only_rest).
	OpReadOnlyMount = "readonly-mount"
	OpRestore       = "restore" // put the host's live Target back on top
	OpMount         = "mount"   // apply a storage mount (a private tree) on Target
)

// Op is one mount operation of a view.
type Op struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Source string `json:"source,omitempty"`
	Lower  string `json:"lower,omitempty"`
	Upper  string `json:"upper,omitempty"`
	Work   string `json:"work,omitempty"`
	// Mount is the tree's mount, as data (OpMount).
	Mount *storage.Mount `json:"mount,omitempty"`
	// Mkdir creates Target inside a private layer when it is missing there
	// (never on the host: the planner only sets it under a private layer).
	Mkdir bool `json:"mkdir,omitempty"`
	// Why is the rule this op comes from, for plan output.
	Why string `json:"why,omitempty"`
}

func (o Op) String() string {
	switch o.Kind {
	case OpBind:
		return fmt.Sprintf("bind %s -> %s", o.Source, o.Target)
	case OpOverlay:
		return fmt.Sprintf("overlay lower=%s upper=%s -> %s", o.Lower, o.Upper, o.Target)
	case OpTmpfs:
		return fmt.Sprintf("tmpfs -> %s (private scratch)", o.Target)
	case OpReadOnly:
		return fmt.Sprintf("read-only %s", o.Target)
	case OpReadOnlyMount:
		return fmt.Sprintf("read-only mount %s", o.Target)
	case OpRestore:
		return fmt.Sprintf("restore host %s (shared)", o.Target)
	case OpMount:
		if o.Mount != nil {
			return fmt.Sprintf("%s %s -> %s", o.Mount.Type, o.Mount.Source, o.Target)
		}
	}
	return o.Kind + " " + o.Target
}

// Compile turns the view's operations into the keeper's primitive steps
// (supervise.KeeperOp), in the order the keeper applies them: the live
// host paths that shares restore are captured (cloned) before anything can
// cover them, and moved back on top at the end of their rule. Storage
// mounts become mount(2) calls with their flags and data; a bind with
// extra flags becomes a bind plus a remount.
func Compile(ops []Op) ([]supervise.KeeperOp, error) {
	var out []supervise.KeeperOp
	slot := map[string]int{}
	for _, o := range ops {
		if o.Kind != OpRestore {
			continue
		}
		if _, ok := slot[o.Target]; !ok {
			slot[o.Target] = len(slot)
			out = append(out, supervise.KeeperOp{Kind: "capture", Target: o.Target, Slot: slot[o.Target]})
		}
	}
	if len(slot) > 64 {
		return nil, fmt.Errorf("view: %d shared paths, at most 64: %w", len(slot), storage.ErrInvalidRequest)
	}
	for _, o := range ops {
		if o.Mkdir && o.Kind != OpRestore {
			out = append(out, supervise.KeeperOp{Kind: "mkdirs", Target: o.Target})
		}
		switch o.Kind {
		case OpBind:
			out = append(out, supervise.KeeperOp{Kind: "mount", Source: o.Source, Target: o.Target, Flags: unix.MS_BIND | unix.MS_REC})
		case OpOverlay:
			data := "lowerdir=" + storage.EscapeOverlayPath(o.Lower) + ",upperdir=" + storage.EscapeOverlayPath(o.Upper) + ",workdir=" + storage.EscapeOverlayPath(o.Work)
			out = append(out, supervise.KeeperOp{Kind: "mount", Source: "overlay", Target: o.Target, FSType: "overlay", Data: data})
		case OpMount:
			if o.Mount == nil {
				return nil, errors.New("view: mount op without a mount")
			}
			ks, err := mountOps(*o.Mount, o.Target)
			if err != nil {
				return nil, fmt.Errorf("view: %s: %w", o, err)
			}
			out = append(out, ks...)
		case OpTmpfs:
			out = append(out, supervise.KeeperOp{Kind: "tmpfs", Target: o.Target})
		case OpReadOnly:
			out = append(out, supervise.KeeperOp{Kind: "mount", Source: o.Target, Target: o.Target, Flags: unix.MS_BIND | unix.MS_REC},
				supervise.KeeperOp{Kind: "rdonly", Target: o.Target})
		case OpReadOnlyMount:
			out = append(out, supervise.KeeperOp{Kind: "rdonly-one", Target: o.Target})
		case OpRestore:
			if o.Mkdir {
				out = append(out, supervise.KeeperOp{Kind: "mkpoint", Target: o.Target, Slot: slot[o.Target]})
			}
			out = append(out, supervise.KeeperOp{Kind: "move", Target: o.Target, Slot: slot[o.Target]})
		default:
			return nil, fmt.Errorf("view: unknown op %q", o.Kind)
		}
	}
	return out, nil
}

// mountOps turns a storage mount (mounts as data) into keeper steps at
// target.
func mountOps(m storage.Mount, target string) ([]supervise.KeeperOp, error) {
	if m.Target != "" {
		if filepath.IsAbs(m.Target) || !filepath.IsLocal(m.Target) {
			return nil, fmt.Errorf("target %q must be relative and inside the root: %w", m.Target, storage.ErrInvalidRequest)
		}
		target = filepath.Join(target, m.Target)
	}
	flags, data := storage.MountFlags(m.Options)
	if len(data) >= os.Getpagesize() {
		return nil, fmt.Errorf("options are %d bytes, mount(2) takes less than a page: %w", len(data), storage.ErrInvalidRequest)
	}
	if m.Type == "bind" || flags&unix.MS_BIND != 0 {
		ops := []supervise.KeeperOp{{Kind: "mount", Source: m.Source, Target: target, Flags: unix.MS_BIND | (flags & unix.MS_REC)}}
		// A bind ignores every flag but MS_REC; the others need a remount.
		if rest := flags &^ (unix.MS_BIND | unix.MS_REC); rest != 0 {
			ops = append(ops, supervise.KeeperOp{Kind: "remount", Target: target, Flags: rest})
		}
		return ops, nil
	}
	return []supervise.KeeperOp{{Kind: "mount", Source: m.Source, Target: target, FSType: m.Type, Flags: flags, Data: data}}, nil
}

// ErrKeeperLost reports that the keeper holding a view is gone.
var ErrKeeperLost = errors.New("the environment's keeper is gone")

// RootPath maps a path inside the view of a live keeper to a host path
// that reaches it (/proc/PID/root/...).
func RootPath(keeperPID int, p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", keeperPID), p)
}
