package safefs

import (
	"fmt"
	"path/filepath"
	"strings"
)

// FileID identifies a file or directory independently of its path.
//
// Dev and Ino are st_dev and st_ino. FSID is statfs' f_fsid, which disk
// filesystems derive from their UUID (Btrfs also mixes in the subvolume
// id), so it survives a remount, while st_dev on Btrfs is an anonymous
// per-subvolume number that can change at the next mount. Same therefore
// compares FSID when both sides have one and Dev otherwise.
type FileID struct {
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	FSID uint64 `json:"fsid,omitempty"`
}

// Same reports whether a and b name the same object.
func (a FileID) Same(b FileID) bool {
	if a.Ino != b.Ino || a.Ino == 0 {
		return false
	}
	if a.FSID != 0 && b.FSID != 0 {
		return a.FSID == b.FSID
	}
	return a.Dev == b.Dev
}

func (a FileID) String() string {
	return fmt.Sprintf("dev %d ino %d fsid %016x", a.Dev, a.Ino, a.FSID)
}

// Within reports whether p is root or below it, lexically. Both must be
// clean absolute paths; it says nothing about symbolic links, so use it
// on paths whose components were opened without following any.
func Within(root, p string) bool {
	if !filepath.IsAbs(root) || !filepath.IsAbs(p) {
		return false
	}
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
