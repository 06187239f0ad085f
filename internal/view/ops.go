package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/storage"
)

// Op kinds, applied in the order given.
const (
	OpBind     = "bind"     // bind Source onto Target
	OpOverlay  = "overlay"  // mount overlay (Lower, Upper, Work) on Target
	OpTmpfs    = "tmpfs"    // private empty tmpfs on Target
	OpReadOnly = "readonly" // make Target (recursively) read-only
	OpRestore  = "restore"  // put the host's live Target back on top
	OpMount    = "mount"    // apply a storage mount (a private tree) on Target
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
	case OpRestore:
		return fmt.Sprintf("restore host %s (shared)", o.Target)
	case OpMount:
		if o.Mount != nil {
			return fmt.Sprintf("%s %s -> %s", o.Mount.Type, o.Mount.Source, o.Target)
		}
	}
	return o.Kind + " " + o.Target
}

// apply runs ops in the current mount namespace, which must be private.
// Shared paths are captured (open_tree clones) before anything can cover
// them, and moved back at the end.
func apply(ops []Op) error {
	restore := map[string]int{}
	defer func() {
		for _, fd := range restore {
			unix.Close(fd)
		}
	}()
	for _, o := range ops {
		if o.Kind != OpRestore {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, o.Target, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return &os.PathError{Op: "open_tree", Path: o.Target, Err: err}
		}
		restore[o.Target] = fd
	}
	for _, o := range ops {
		if o.Mkdir && o.Kind != OpRestore {
			if err := os.MkdirAll(o.Target, 0o755); err != nil {
				return fmt.Errorf("creating mount point %s: %w", o.Target, err)
			}
		}
		var err error
		switch o.Kind {
		case OpBind:
			err = mount(o.Source, o.Target, "", unix.MS_BIND|unix.MS_REC, "")
		case OpOverlay:
			opts := "lowerdir=" + escapeOpt(o.Lower) + ",upperdir=" + escapeOpt(o.Upper) + ",workdir=" + escapeOpt(o.Work)
			err = mount("overlay", o.Target, "overlay", 0, opts)
		case OpMount:
			if o.Mount == nil {
				err = errors.New("mount op without a mount")
			} else {
				err = o.Mount.Apply(o.Target)
			}
		case OpTmpfs:
			mode := "1777"
			if st, serr := os.Stat(o.Target); serr == nil {
				mode = fmt.Sprintf("%o", uint32(st.Mode().Perm())|modeSticky(st.Mode()))
			}
			err = mount("tmpfs", o.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+mode)
		case OpReadOnly:
			if err = mount(o.Target, o.Target, "", unix.MS_BIND|unix.MS_REC, ""); err == nil {
				attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
				if serr := unix.MountSetattr(-1, o.Target, unix.AT_RECURSIVE, attr); serr != nil {
					err = &os.PathError{Op: "mount_setattr", Path: o.Target, Err: serr}
				}
			}
		case OpRestore:
			fd := restore[o.Target]
			if o.Mkdir {
				err = makeMountPoint(fd, o.Target)
			}
			if err == nil {
				if merr := unix.MoveMount(fd, "", unix.AT_FDCWD, o.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); merr != nil {
					err = &os.PathError{Op: "move_mount", Path: o.Target, Err: merr}
				}
			}
		default:
			err = fmt.Errorf("unknown view op %q", o.Kind)
		}
		if err != nil {
			return fmt.Errorf("view: %s: %w", o, err)
		}
	}
	return nil
}

// makeMountPoint creates target when it is missing, as a directory or an
// empty file like the mount captured in fd. A restored share lies under a
// covering rule, so a missing target is missing from a private layer (an
// empty scratch, a tree without that path) and is created there, never on
// the host.
func makeMountPoint(fd int, target string) error {
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: target, Err: err}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return os.Mkdir(target, os.FileMode(st.Mode&0o777))
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

func modeSticky(m os.FileMode) uint32 {
	if m&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	for {
		err := unix.Mount(src, dst, fstype, flags, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "mount", Path: dst, Err: err}
		}
		return nil
	}
}

// escapeOpt escapes characters overlay treats specially in paths.
func escapeOpt(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// ErrKeeperLost reports that the keeper holding a view is gone.
var ErrKeeperLost = errors.New("the environment's keeper is gone")

// RootPath maps a path inside the view of a live keeper to a host path
// that reaches it (/proc/PID/root/...).
func RootPath(keeperPID int, p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", keeperPID), p)
}
