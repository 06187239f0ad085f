package storage

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// Sentinel errors. Test for them with errors.Is; the messages around them
// name the path and, where there is one, the fix.
var (
	// ErrExists reports that the destination Prepare was asked to allocate
	// already exists. Prepare never adopts an existing destination. It
	// also matches fs.ErrExist.
	ErrExists = fmt.Errorf("destination already exists (allocation never adopts an existing path): %w", fs.ErrExist)

	// ErrIdentityMismatch reports that what is at a recorded path is no
	// longer the object that was recorded there (another inode, another
	// subvolume, another lower, a symbolic link). Nothing is deleted or
	// mounted. It is safefs.ErrIdentityMismatch.
	ErrIdentityMismatch = safefs.ErrIdentityMismatch

	// ErrWrongKind reports a Tree handed to the backend of another kind.
	ErrWrongKind = errors.New("tree is of another kind")

	// ErrUnsupportedKind reports a Kind this package doesn't implement.
	ErrUnsupportedKind = errors.New("unsupported tree kind")

	// ErrInvalidRequest reports a malformed Request (relative paths, an
	// empty source, a destination overlapping the source).
	ErrInvalidRequest = errors.New("invalid storage request")

	// ErrNotBtrfs reports a path that must be on a Btrfs filesystem but
	// isn't.
	ErrNotBtrfs = errors.New("not on a btrfs filesystem")

	// ErrNotSubvolume reports a Btrfs source that is a plain directory
	// rather than the root of a subvolume.
	ErrNotSubvolume = errors.New("not a btrfs subvolume")

	// ErrCrossFilesystem reports a Btrfs snapshot whose destination is on
	// another filesystem than its source.
	ErrCrossFilesystem = errors.New("source and destination are on different filesystems")

	// ErrRemoveNotPermitted reports that the kernel refused to destroy a
	// subvolume for a caller without CAP_SYS_ADMIN: Btrfs only allows that
	// on filesystems mounted with user_subvol_rm_allowed.
	ErrRemoveNotPermitted = errors.New("deleting a btrfs subvolume without CAP_SYS_ADMIN needs the filesystem mounted with -o user_subvol_rm_allowed")

	// ErrReflinkUnsupported reports that a copy asked for ReflinkAlways
	// met a file the filesystem couldn't clone.
	ErrReflinkUnsupported = errors.New("reflink (FICLONE) not supported here")

	// ErrBusy reports that something is mounted inside a tree that is
	// about to be removed.
	ErrBusy = errors.New("tree is in use: a mount is inside it")
)
