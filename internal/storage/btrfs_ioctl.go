package storage

// Btrfs ioctl definitions that golang.org/x/sys/unix (v0.50.0) lacks; it has
// only BTRFS_SUPER_MAGIC. Everything here mirrors the kernel's
// include/uapi/linux/btrfs.h; ioctl_test.go checks each request number
// against the _IOC encoding of its struct's size.

// BTRFS_IOCTL_MAGIC is 0x94.
const (
	// _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	btrfsIocSubvolCreate = 0x5000940e
	// _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	btrfsIocSnapDestroy = 0x5000940f
	// _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	btrfsIocInoLookup = 0xd0009412
	// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	btrfsIocSnapCreateV2 = 0x50009417
	// _IOR(0x94, 60, struct btrfs_ioctl_get_subvol_info_args), Linux 4.18+
	btrfsIocGetSubvolInfo = 0x81f8943c
	// _IOW(0x94, 63, struct btrfs_ioctl_vol_args_v2), Linux 5.7+
	btrfsIocSnapDestroyV2 = 0x5000943f
)

const (
	// BTRFS_FIRST_FREE_OBJECTID: the inode number of every subvolume's
	// root directory.
	btrfsFirstFreeObjectID = 256
	// BTRFS_SUBVOL_SPEC_BY_ID: vol_args_v2 names the subvolume by id.
	btrfsSubvolSpecByID = 1 << 4
	// BTRFS_PATH_NAME_MAX
	btrfsPathNameMax = 4087
	// BTRFS_SUBVOL_NAME_MAX
	btrfsSubvolNameMax = 4039
	// BTRFS_INO_LOOKUP_PATH_MAX
	btrfsInoLookupPathMax = 4080
	// BTRFS_VOL_NAME_MAX
	btrfsVolNameMax = 255
	// BTRFS_UUID_SIZE
	btrfsUUIDSize = 16
)

// struct btrfs_ioctl_vol_args
type btrfsVolArgs struct {
	Fd   int64
	Name [btrfsPathNameMax + 1]byte
}

// struct btrfs_ioctl_vol_args_v2. The trailing union holds the name, or a
// devid, or (with BTRFS_SUBVOL_SPEC_BY_ID) the subvolume id in its first
// eight bytes.
type btrfsVolArgsV2 struct {
	Fd      int64
	Transid uint64
	Flags   uint64
	Unused  [4]uint64 // union { struct { size; qgroup_inherit* }; unused[4] }
	Name    [btrfsSubvolNameMax + 1]byte
}

// struct btrfs_ioctl_ino_lookup_args
type btrfsInoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [btrfsInoLookupPathMax]byte
}

// struct btrfs_ioctl_timespec (16 bytes with its tail padding)
type btrfsTimespec struct {
	Sec  uint64
	Nsec uint32
	_    uint32
}

// struct btrfs_ioctl_get_subvol_info_args
type btrfsGetSubvolInfoArgs struct {
	TreeID       uint64
	Name         [btrfsVolNameMax + 1]byte
	ParentID     uint64
	DirID        uint64
	Generation   uint64
	Flags        uint64
	UUID         [btrfsUUIDSize]byte
	ParentUUID   [btrfsUUIDSize]byte
	ReceivedUUID [btrfsUUIDSize]byte
	CTransid     uint64
	OTransid     uint64
	STransid     uint64
	RTransid     uint64
	CTime        btrfsTimespec
	OTime        btrfsTimespec
	STime        btrfsTimespec
	RTime        btrfsTimespec
	Reserved     [8]uint64
}
