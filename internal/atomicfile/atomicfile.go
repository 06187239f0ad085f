// Package atomicfile is hostfork's one durable file writer: a file's new
// content is written to a new temporary file beside it (made exclusively,
// never through a symbolic link), flushed to disk, and renamed over the
// old one, and the directory is flushed too; so a reader, or anyone after
// a crash or a power loss, sees the old content or the new one, never a
// mix or an empty file. Every error is returned, and what failed leaves
// the old file as it was and no temporary file behind.
//
// Records that are evidence (receipts, stop decisions, capture receipts,
// manifests, installed units) all go through it. Any internal package may
// import it.
package atomicfile

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteFile replaces path's content with data, durably, giving the file
// mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// Replace is WriteFile without flushing to disk: readers see the old
// content or the new, but a power loss may take the new back. It is for
// readable copies of what the registry holds durably (manifests, command
// records), never for evidence.
func Replace(path string, data []byte, perm os.FileMode) error { return write(path, data, perm, false) }

func write(path string, data []byte, perm os.FileMode, durable bool) error {
	dir, base := filepath.Split(path)
	dir = cmp.Or(dir, ".")
	var (
		f   *os.File
		tmp string
		err error
	)
	for try := 0; try < 10; try++ {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		tmp = filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm.Perm())
		if !os.IsExist(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Chmod(perm.Perm()); err == nil { // the umask is not wanted
		_, err = f.Write(data)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("writing %s: syncing its directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("writing %s: syncing its directory: %w", path, err)
	}
	return nil
}
