package linux

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// FS is what statfs(2) says of the filesystem holding a path.
type FS struct {
	Type                  int64 // the filesystem's magic number
	TotalBytes, FreeBytes uint64
}

// StatFS reads the filesystem that holds path; FreeBytes is what an
// unprivileged user may still use.
func StatFS(path string) (FS, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return FS{}, err
	}
	return FS{Type: int64(fs.Type), TotalBytes: fs.Blocks * uint64(fs.Bsize), FreeBytes: fs.Bavail * uint64(fs.Bsize)}, nil
}

// Filesystems are the filesystem types the running kernel lists in
// /proc/filesystems (none when it can't be read).
func Filesystems() map[string]bool {
	m := map[string]bool{}
	b, _ := os.ReadFile("/proc/filesystems")
	for _, line := range strings.Split(string(b), "\n") {
		if fs := strings.TrimSpace(strings.TrimPrefix(line, "nodev")); fs != "" {
			m[fs] = true
		}
	}
	return m
}
