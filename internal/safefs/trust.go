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
