package limits

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mkdir creates one directory, retrying EINTR.
func mkdir(path string) error {
	for {
		err := unix.Mkdir(path, 0o755)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
		return nil
	}
}

// rmdir removes one directory, retrying EINTR.
func rmdir(path string) error {
	for {
		err := unix.Rmdir(path)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "rmdir", Path: path, Err: err}
		}
		return nil
	}
}

// RemoveV1Dir removes a v1 limit group left behind: its subdirectories
// (best effort), then itself. One already gone is not an error.
func RemoveV1Dir(path string) error {
	if ents, err := os.ReadDir(path); err == nil {
		for _, ent := range ents {
			if ent.IsDir() {
				_ = unix.Rmdir(filepath.Join(path, ent.Name()))
			}
		}
	}
	if err := unix.Rmdir(path); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: path, Err: err}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readUint reads a control file holding one unsigned number. It returns nil
// when the file can't be read or parsed: unknown, never zero.
func readUint(path string) *uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// readKeyed reads a flat-keyed control file ("key value" lines, as
// memory.events, cpu.stat, pids.events, memory.oom_control). A nil map means
// the file could not be read.
func readKeyed(path string) map[string]uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return parseKeyed(string(b))
}

func parseKeyed(s string) map[string]uint64 {
	m := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// key returns a pointer to m[k], or nil when the file or the key is missing.
func key(m map[string]uint64, k string) *uint64 {
	if m == nil {
		return nil
	}
	v, ok := m[k]
	if !ok {
		return nil
	}
	return &v
}

// scaled multiplies a known value, keeping unknown unknown.
func scaled(p *uint64, by uint64) *uint64 {
	if p == nil {
		return nil
	}
	v := *p * by
	return &v
}

// nearestWritable reports whether path, or its nearest existing ancestor
// (not above stop), is writable: whether a group can be made at path.
func nearestWritable(path, stop string) error {
	for p := path; ; p = filepath.Dir(p) {
		err := unix.Access(p, unix.W_OK)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == stop || p == filepath.Dir(p) {
			return &os.PathError{Op: "access", Path: p, Err: err}
		}
	}
}
