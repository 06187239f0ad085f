package safefs

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckTrusted checks that nobody but owner and root can write or replace
// the directory at path: the rule of ssh's StrictModes, with the allowance
// systemd-tmpfiles and sudo make for /tmp. Every existing component of the
// absolute, cleaned path, from "/" down to path itself, must be a real
// directory (a symbolic link is refused, not resolved: OpenDir would
// refuse it later anyway, so the error names its target as the path to
// use), owned by owner or by root, and not writable by its group or
// others, except that a root-owned directory with the sticky bit (/tmp,
// /var/tmp, /dev/shm) is accepted as an ancestor: others can't rename or
// delete what they don't own in it. Components that don't exist yet end
// the walk: whoever creates them makes them private.
//
// The error matches ErrUntrusted or ErrSymlink, and names the offending
// directory, its owner and mode, and the fix.
func CheckTrusted(path string, owner int) error { return checkTrusted(path, owner, false) }

// CheckAncestorsTrusted is CheckTrusted for the directories that hold
// path: each one, down to path's parent, is judged as an ancestor (a
// root-owned sticky directory is accepted); path itself is not looked at.
func CheckAncestorsTrusted(path string, owner int) error {
	if !filepath.IsAbs(path) {
		return pathErr("check", path, fmt.Errorf("not an absolute path: %w", unix.EINVAL))
	}
	path = filepath.Clean(path)
	if path == "/" {
		return nil
	}
	return checkTrusted(filepath.Dir(path), owner, true)
}

func checkTrusted(path string, owner int, allAncestors bool) error {
	if !filepath.IsAbs(path) {
		return pathErr("check", path, fmt.Errorf("not an absolute path: %w", unix.EINVAL))
	}
	path = filepath.Clean(path)
	fd, err := openat(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return pathErr("open", "/", err)
	}
	defer func() { unix.Close(fd) }()
	comps := []string{}
	if path != "/" {
		comps = strings.Split(path[1:], "/")
	}
	check := func(fd int, p string, ancestor bool) error {
		st, err := fstat(fd)
		if err != nil {
			return pathErr("fstat", p, err)
		}
		e := entry{path: p, mode: st.Mode, uid: st.Uid}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			e.target = readlinkFd(fd)
		}
		return trusted(e, owner, ancestor)
	}
	if err := check(fd, "/", len(comps) > 0 || allAncestors); err != nil {
		return err
	}
	cur := "/"
	for i, c := range comps {
		cur = filepath.Join(cur, c)
		next, err := openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err == unix.ENOENT {
			return nil
		}
		if err != nil {
			return pathErr("open", cur, err)
		}
		unix.Close(fd)
		fd = next
		if err := check(fd, cur, i < len(comps)-1 || allAncestors); err != nil {
			return err
		}
	}
	return nil
}

// readlinkFd reads the target of the symbolic link open as an O_PATH
// descriptor, for messages.
func readlinkFd(fd int) string {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil || n < 0 {
		return "?"
	}
	return string(buf[:n])
}

// entry is what the trust rule looks at in one path component.
type entry struct {
	path   string
	mode   uint32 // st_mode: type and permission bits
	uid    uint32
	target string // a symbolic link's target, for the message
}

// trusted is the rule of CheckTrusted for one component; ancestor is true
// for every component but the last.
func trusted(e entry, owner int, ancestor bool) error {
	switch e.mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		real := e.target
		if !filepath.IsAbs(real) {
			real = filepath.Join(filepath.Dir(e.path), real)
		}
		return fmt.Errorf("%s is a symbolic link (to %s), which hostfork does not follow here; name the real directory (%s) instead: %w",
			e.path, e.target, real, ErrSymlink)
	default:
		return fmt.Errorf("%s is not a directory (mode %v): %w", e.path, FileMode(e.mode), ErrUntrusted)
	}
	if int(e.uid) != owner && e.uid != 0 {
		who := fmt.Sprintf("uid %d or root", owner)
		if owner == 0 {
			who = "root"
		}
		return fmt.Errorf("%s is owned by uid %d, not by %s, so that user can replace what is below it (mode %v); choose a directory that only you can write, or have it owned by you: %w",
			e.path, e.uid, who, FileMode(e.mode), ErrUntrusted)
	}
	if e.mode&0o022 == 0 {
		return nil
	}
	if ancestor && e.uid == 0 && e.mode&unix.S_ISVTX != 0 {
		return nil // like /tmp: others can't rename or delete our entries
	}
	who := "others"
	switch e.mode & 0o022 {
	case 0o020:
		who = "its group"
	case 0o022:
		who = "its group and others"
	}
	return fmt.Errorf("%s is writable by %s (mode %v, owner uid %d): run `chmod go-w %s`, or choose a directory that only you can write: %w",
		e.path, who, FileMode(e.mode), e.uid, e.path, ErrUntrusted)
}

// OpenSource opens the directory at path, a tree's source (the
// directory hostfork copies, snapshots or mounts as a lower): symbolic
// links are followed only as ResolveTarget follows them (where no other
// user can have planted them), the result is opened with
// RESOLVE_NO_SYMLINKS, and the caller then reads only through the
// descriptor. A source may lie in another user's directory: that user can
// only put another directory of their own at its name, never one of
// root's, so untrusted directories on the way are not refused here.
func OpenSource(path string) (*Dir, error) {
	t, err := ResolveTarget(path, unix.Geteuid())
	if err != nil {
		return nil, err
	}
	if !t.Exists {
		return nil, pathErr("open", t.Path, unix.ENOENT)
	}
	return OpenDir(t.Path)
}

// Target is what ResolveTarget found for a view target.
type Target struct {
	// Path is the target's absolute path with every symbolic link
	// replaced by what it names: the path a keeper opens with
	// RESOLVE_NO_SYMLINKS.
	Path string
	// Exists is false when a component from some point on is missing;
	// Path then ends with the missing components as written.
	Exists bool
	// Untrusted, when set, says why another user could choose what Path
	// names: a directory on the way that someone other than owner and
	// root can write (or a sticky one whose next entry is theirs). It
	// matches ErrUntrusted.
	Untrusted error
}

// maxLinks bounds the symbolic links ResolveTarget follows, as the
// kernel's own resolution does (ELOOP).
const maxLinks = 40

// ResolveTarget resolves path, a view target (a mount point hostfork
// covers in an environment's view), by descriptors from "/". Symbolic
// links are followed only where another user can't have planted them: a
// link owned by owner or root, in a directory nobody else can write. A
// link met after an untrusted directory is an ErrSymlink error that names
// the real path to use, so what another user can write never redirects a
// mount. Directories others can write are reported in Target.Untrusted
// (the caller decides whether the operator allowed them); the target
// itself is judged only when its directory is sticky (/tmp): an entry
// another user owns there is theirs to rename.
func ResolveTarget(path string, owner int) (Target, error) {
	if !filepath.IsAbs(path) {
		return Target{}, pathErr("resolve", path, fmt.Errorf("not an absolute path: %w", unix.EINVAL))
	}
	comps := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	if comps[0] == "" {
		comps = nil
	}
	var t Target
	fd, err := openat(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return t, pathErr("open", "/", err)
	}
	defer func() { unix.Close(fd) }()
	cur, links := "/", 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		if c == "." || c == "" {
			continue
		}
		parent, err := fstat(fd)
		if err != nil {
			return t, pathErr("fstat", cur, err)
		}
		// The directory holding c: may someone else rename c?
		if t.Untrusted == nil {
			if err := trusted(entry{path: cur, mode: parent.Mode, uid: parent.Uid}, owner, true); err != nil {
				t.Untrusted = err
			}
		}
		if c == ".." {
			next, err := openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				return t, pathErr("open", cur+"/..", err)
			}
			unix.Close(fd)
			fd, cur = next, filepath.Dir(cur)
			continue
		}
		p := filepath.Join(cur, c)
		next, err := openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err == unix.ENOENT {
			t.Path = filepath.Join(append([]string{p}, comps...)...)
			return t, nil
		}
		if err != nil {
			return t, pathErr("open", p, err)
		}
		st, err := fstat(next)
		if err != nil {
			unix.Close(next)
			return t, pathErr("fstat", p, err)
		}
		sticky := parent.Mode&0o002 != 0 && parent.Mode&unix.S_ISVTX != 0
		if t.Untrusted == nil && sticky && int(st.Uid) != owner && st.Uid != 0 {
			t.Untrusted = fmt.Errorf("%s is owned by uid %d in the sticky directory %s, so that user can replace it: %w", p, st.Uid, cur, ErrUntrusted)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if len(comps) > 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				unix.Close(next)
				return t, pathErr("open", p, unix.ENOTDIR)
			}
			unix.Close(fd)
			fd, cur = next, p
			continue
		}
		target := readlinkFd(next)
		unix.Close(next)
		real := target
		if !filepath.IsAbs(real) {
			real = filepath.Join(cur, real)
		}
		if t.Untrusted != nil || (int(st.Uid) != owner && st.Uid != 0) {
			why := "a directory another user can write holds it"
			if t.Untrusted == nil {
				why = fmt.Sprintf("uid %d owns it", st.Uid)
			}
			return t, fmt.Errorf("%s is a symbolic link (to %s) and %s, so hostfork does not follow it to a mount target; name the real path (%s) instead: %w",
				p, target, why, filepath.Join(append([]string{real}, comps...)...), ErrSymlink)
		}
		if links++; links > maxLinks {
			return t, pathErr("resolve", path, unix.ELOOP)
		}
		// Resolve the link's text in place of c, from "/" or from cur.
		comps = append(strings.Split(strings.Trim(target, "/"), "/"), comps...)
		if filepath.IsAbs(target) {
			root, err := openat(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				return t, pathErr("open", "/", err)
			}
			unix.Close(fd)
			fd, cur = root, "/"
		}
	}
	t.Path, t.Exists = cur, true
	return t, nil
}
