package storage

import (
	"slices"
	"testing"
	"unsafe"
)

// ioc is the kernel's _IOC encoding (include/uapi/asm-generic/ioctl.h).
func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | typ<<8 | nr
}

const (
	iocWrite = 1
	iocRead  = 2
)

func TestBtrfsIoctlNumbers(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"SUBVOL_CREATE", btrfsIocSubvolCreate, ioc(iocWrite, 0x94, 14, unsafe.Sizeof(btrfsVolArgs{}))},
		{"SNAP_DESTROY", btrfsIocSnapDestroy, ioc(iocWrite, 0x94, 15, unsafe.Sizeof(btrfsVolArgs{}))},
		{"INO_LOOKUP", btrfsIocInoLookup, ioc(iocRead|iocWrite, 0x94, 18, unsafe.Sizeof(btrfsInoLookupArgs{}))},
		{"SNAP_CREATE_V2", btrfsIocSnapCreateV2, ioc(iocWrite, 0x94, 23, unsafe.Sizeof(btrfsVolArgsV2{}))},
		{"GET_SUBVOL_INFO", btrfsIocGetSubvolInfo, ioc(iocRead, 0x94, 60, unsafe.Sizeof(btrfsGetSubvolInfoArgs{}))},
		{"SNAP_DESTROY_V2", btrfsIocSnapDestroyV2, ioc(iocWrite, 0x94, 63, unsafe.Sizeof(btrfsVolArgsV2{}))},
	} {
		if c.got != c.want {
			t.Errorf("BTRFS_IOC_%s = %#x, the struct size gives %#x", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"btrfs_ioctl_vol_args", unsafe.Sizeof(btrfsVolArgs{}), 4096},
		{"btrfs_ioctl_vol_args_v2", unsafe.Sizeof(btrfsVolArgsV2{}), 4096},
		{"btrfs_ioctl_ino_lookup_args", unsafe.Sizeof(btrfsInoLookupArgs{}), 4096},
		{"btrfs_ioctl_get_subvol_info_args", unsafe.Sizeof(btrfsGetSubvolInfoArgs{}), 504},
		{"btrfs_ioctl_get_subvol_info_args.uuid offset", unsafe.Offsetof(btrfsGetSubvolInfoArgs{}.UUID), 296},
		{"btrfs_ioctl_get_subvol_info_args.ctime offset", unsafe.Offsetof(btrfsGetSubvolInfoArgs{}.CTime), 376},
	} {
		if c.got != c.want {
			t.Errorf("sizeof/offsetof %s = %d, kernel %d", c.name, c.got, c.want)
		}
	}
}

func TestMountinfoHelpers(t *testing.T) {
	mps, err := mountsUnder("/")
	if err != nil || !slices.Contains(mps, "/") {
		t.Errorf("mountsUnder(/) = %q, %v", mps, err)
	}
}

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		opts  []string
		flags uintptr
		data  string
	}{
		{nil, 0, ""},
		{[]string{"bind"}, 0x1000, ""},
		{[]string{"rbind", "ro", "nosuid"}, 0x1000 | 0x4000 | 1 | 2, ""},
		{[]string{"ro", "rw"}, 0, ""},
		{[]string{"lowerdir=/l", "upperdir=/u", "workdir=/w", "nodev"}, 4, "lowerdir=/l,upperdir=/u,workdir=/w"},
	} {
		f, d := parseOptions(c.opts)
		if f != c.flags || d != c.data {
			t.Errorf("parseOptions(%q) = %#x, %q; want %#x, %q", c.opts, f, d, c.flags, c.data)
		}
	}
	if got := EscapeOverlayPath(`/a,b:c\d`); got != `/a\,b\:c\\d` {
		t.Errorf("EscapeOverlayPath: %q", got)
	}
}
