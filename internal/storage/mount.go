package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Mount is one mount described as data, in the manner of containerd's
// mount.Mount: the view decides where and in which namespace to apply it.
type Mount struct {
	// Type is the filesystem type: "bind" for a bind mount, "overlay".
	Type string `json:"type"`
	// Source is the host path of a bind, or a label for other types.
	Source string `json:"source"`
	// Target is relative to the root given to Apply; "" is the root.
	Target string `json:"target,omitempty"`
	// Options are mount(8)-style: flag words (bind, rbind, ro, nosuid,
	// …) and filesystem data (lowerdir=…). Paths inside data options are
	// escaped with EscapeOverlayPath.
	Options []string `json:"options,omitempty"`
}

// flagOptions maps mount(8) flag words to mount(2) flags: set or clear.
var flagOptions = map[string]struct {
	clear bool
	flag  uintptr
}{
	"bind":        {false, unix.MS_BIND},
	"rbind":       {false, unix.MS_BIND | unix.MS_REC},
	"ro":          {false, unix.MS_RDONLY},
	"rw":          {true, unix.MS_RDONLY},
	"nosuid":      {false, unix.MS_NOSUID},
	"suid":        {true, unix.MS_NOSUID},
	"nodev":       {false, unix.MS_NODEV},
	"dev":         {true, unix.MS_NODEV},
	"noexec":      {false, unix.MS_NOEXEC},
	"exec":        {true, unix.MS_NOEXEC},
	"noatime":     {false, unix.MS_NOATIME},
	"relatime":    {false, unix.MS_RELATIME},
	"nodiratime":  {false, unix.MS_NODIRATIME},
	"strictatime": {false, unix.MS_STRICTATIME},
}

// parseOptions splits options into mount(2) flags and the data string.
func parseOptions(opts []string) (flags uintptr, data string) {
	var d []string
	for _, o := range opts {
		if f, ok := flagOptions[o]; ok {
			if f.clear {
				flags &^= f.flag
			} else {
				flags |= f.flag
			}
			continue
		}
		d = append(d, o)
	}
	return flags, strings.Join(d, ",")
}

// EscapeOverlayPath escapes the characters overlayfs treats specially in
// lowerdir/upperdir/workdir values: the option separator ',', the layer
// separator ':' and the escape '\' itself.
func EscapeOverlayPath(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// Apply mounts m at root/m.Target, which must exist. Call it only in a
// private mount namespace: a mount made in the caller's namespace is visible
// to the whole host.
func (m Mount) Apply(root string) error {
	target := root
	if m.Target != "" {
		if filepath.IsAbs(m.Target) || !filepath.IsLocal(m.Target) {
			return fmt.Errorf("mounting %s: target %q must be relative and inside the root: %w", m.Type, m.Target, ErrInvalidRequest)
		}
		target = filepath.Join(root, m.Target)
	}
	flags, data := parseOptions(m.Options)
	typ := m.Type
	if typ == "bind" {
		typ = ""
		flags |= unix.MS_BIND
	}
	if len(data) >= os.Getpagesize() {
		return fmt.Errorf("mounting %s on %s: options are %d bytes, mount(2) takes less than a page: %w", m.Type, target, len(data), ErrInvalidRequest)
	}
	if flags&unix.MS_BIND != 0 {
		// A bind ignores every flag but MS_REC; the others need a remount.
		if err := linux.IgnoringEINTR(func() error {
			return unix.Mount(m.Source, target, "", flags&(unix.MS_BIND|unix.MS_REC), "")
		}); err != nil {
			return &os.PathError{Op: "mount bind " + m.Source, Path: target, Err: err}
		}
		rest := flags &^ (unix.MS_BIND | unix.MS_REC)
		if rest == 0 {
			return nil
		}
		if err := linux.IgnoringEINTR(func() error {
			return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|rest, "")
		}); err != nil {
			_ = Unmount(target, unix.MNT_DETACH)
			return &os.PathError{Op: "remount bind", Path: target, Err: err}
		}
		return nil
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Mount(m.Source, target, typ, flags, data) }); err != nil {
		return &os.PathError{Op: "mount " + m.Type, Path: target, Err: err}
	}
	return nil
}

// Unmount unmounts target with umount2 flags (0, or unix.MNT_DETACH).
func Unmount(target string, flags int) error {
	if err := linux.IgnoringEINTR(func() error { return unix.Unmount(target, flags) }); err != nil {
		return &os.PathError{Op: "umount", Path: target, Err: err}
	}
	return nil
}
