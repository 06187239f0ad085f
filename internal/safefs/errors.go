package safefs

import (
	"errors"
	"fmt"
	"io/fs"
)

// Sentinel errors. Test for them with errors.Is; the messages around them
// name the path and, where there is one, the fix.
var (
	// ErrSymlink reports a symbolic link where safefs does not follow one:
	// any component of a path opened with OpenDir, or a name opened
	// relative to a Dir.
	ErrSymlink = errors.New("symbolic link not followed")

	// ErrExists reports that an exclusive creation met an existing name.
	// Nothing existing is adopted. It also matches fs.ErrExist.
	ErrExists = fmt.Errorf("already exists (never adopted): %w", fs.ErrExist)

	// ErrUntrusted reports a directory that someone other than its user
	// and root could write or replace: owned by another user, or writable
	// by its group or others.
	ErrUntrusted = errors.New("directory is not private")

	// ErrIdentityMismatch reports that a name no longer holds the object
	// that was recorded for it (another inode, a symbolic link, a file).
	// Nothing is deleted.
	ErrIdentityMismatch = errors.New("identity does not match the record")

	// ErrCrossesMount reports a removal that would have to descend into
	// another mount or filesystem. Nothing below the mount point is
	// touched.
	ErrCrossesMount = errors.New("a mount point or another filesystem is inside")
)
