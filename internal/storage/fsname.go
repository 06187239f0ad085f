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
	if name, ok := fsNames[magic]; ok {
		return name
	}
	return fmt.Sprintf("0x%x", magic)
}

var fsNames = map[int64]string{
	unix.BTRFS_SUPER_MAGIC: "btrfs", unix.EXT4_SUPER_MAGIC: "ext4", unix.XFS_SUPER_MAGIC: "xfs", unix.TMPFS_MAGIC: "tmpfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay", unix.FUSE_SUPER_MAGIC: "fuse", 0x2fc12fc1: "zfs",
}
