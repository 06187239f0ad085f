package storage

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// BtrfsMagic is Btrfs's statfs magic (f_type).
const BtrfsMagic = unix.BTRFS_SUPER_MAGIC

// FSName names a filesystem by its statfs magic (f_type), for reports:
// "btrfs", "ext4", ... or the magic in hex when unknown.
func FSName(magic int64) string {
	switch magic {
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	case 0x2fc12fc1:
		return "zfs"
	}
	return fmt.Sprintf("0x%x", magic)
}
