package watch

import (
	"context"
	"fmt"
	"os"
	"path"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is one change below a watched directory (Dir): Path is relative
// to it ("" for the directory itself).
type Event struct {
	Path string
	Op   string // ready (first: the watch is in place), create, write, remove, rename, attrib, overflow
	Dir  bool
}

// treeEvents are the changes Dir reports.
const treeEvents = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR

// MaxDirs bounds the directories one recursive Dir watches.
const MaxDirs = 8192

// dirPoll is how often Dir looks at its ctx, and whether the directory
// itself was removed (inotify reports that only at the last close).
const dirPoll = 50 * time.Millisecond

// Dir reports the changes in the directory open as dir (an O_PATH
// descriptor is enough; it stays the caller's) and, with recursive, in
// every directory below it, a new one included, found by descriptor
// without following symbolic links. It calls emit for each change, after
// a first "ready" once the watches are in place, until ctx ends (nil
// then) or the watched directory is removed (a last "remove"). Unlike Watcher
// it says what changed; like it, it is inotify, so a change on another
// mount below dir is seen only where that mount's filesystem reports it.
func Dir(ctx context.Context, dir *os.File, recursive bool, emit func(Event)) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	defer func() { go unix.Close(fd) }() // see Watcher.Close
	paths := map[int]string{}            // watch descriptor → relative path
	// add watches the directory open as dirfd (at rel) and, recursively,
	// those below it. For a directory created while watching (found),
	// what is already inside was made before its watch could see it: it
	// is reported as created.
	var add func(dirfd int, rel string, found bool) error
	add = func(dirfd int, rel string, found bool) error {
		if len(paths) >= MaxDirs {
			return fmt.Errorf("watching more than %d directories: watch a subdirectory", MaxDirs)
		}
		wd, err := unix.InotifyAddWatch(fd, fmt.Sprintf("/proc/self/fd/%d", dirfd), treeEvents)
		if err != nil {
			return os.NewSyscallError("inotify_add_watch", err)
		}
		paths[wd] = rel
		if !recursive {
			return nil
		}
		rd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // unreadable: watched, not descended
		}
		defer unix.Close(rd)
		buf := make([]byte, 16<<10)
		var names []string
		for {
			n, err := unix.Getdents(rd, buf)
			if err != nil || n <= 0 {
				break
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names)
		}
		for _, name := range names {
			if name == "." || name == ".." {
				continue
			}
			sub, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if found {
				emit(Event{Path: path.Join(rel, name), Op: "create", Dir: err == nil})
			}
			if err != nil {
				continue // not a directory, or gone
			}
			err = add(sub, path.Join(rel, name), found)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(int(dir.Fd()), "", false); err != nil {
		return err
	}
	emit(Event{Op: "ready", Dir: true})
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	buf := make([]byte, 64<<10)
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, err := unix.Poll(pfd, int(dirPoll/time.Millisecond))
		if err != nil && err != unix.EINTR {
			return os.NewSyscallError("poll", err)
		}
		if n <= 0 {
			// The directory removed while dir holds it open: inotify says
			// so only at the last close.
			var st unix.Stat_t
			if unix.Fstat(int(dir.Fd()), &st) == nil && st.Nlink == 0 {
				emit(Event{Path: "", Op: "remove", Dir: true})
				return nil
			}
			continue
		}
		n, err = unix.Read(fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				name = string(b)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			m := ev.Mask
			if m&unix.IN_Q_OVERFLOW != 0 {
				emit(Event{Op: "overflow"})
				continue
			}
			base, ok := paths[int(ev.Wd)]
			if !ok {
				continue
			}
			if m&unix.IN_IGNORED != 0 {
				delete(paths, int(ev.Wd))
				if len(paths) == 0 {
					return nil
				}
				continue
			}
			p, isDir := path.Join(base, name), m&unix.IN_ISDIR != 0
			switch {
			case m&unix.IN_DELETE_SELF != 0:
				if base == "" {
					emit(Event{Path: "", Op: "remove", Dir: true})
					return nil
				}
			case m&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				emit(Event{Path: p, Op: "create", Dir: isDir})
				if isDir && recursive {
					if sub, err := openRel(int(dir.Fd()), p); err == nil {
						err = add(sub, p, true)
						unix.Close(sub)
						if err != nil {
							return err
						}
					}
				}
			case m&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
				emit(Event{Path: p, Op: "write"})
			case m&unix.IN_DELETE != 0:
				emit(Event{Path: p, Op: "remove", Dir: isDir})
			case m&unix.IN_MOVED_FROM != 0:
				emit(Event{Path: p, Op: "rename", Dir: isDir})
			case m&unix.IN_ATTRIB != 0:
				emit(Event{Path: p, Op: "attrib", Dir: isDir})
			}
		}
	}
}

// openRel opens the directory rel below dirfd, following no symbolic
// link and never leaving it.
func openRel(dirfd int, rel string) (int, error) {
	return unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}
