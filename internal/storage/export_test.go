package storage

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DestroySubvolumeForTest deletes the subvolume at path by name. Tests use
// it to delete a baseline; the package itself never deletes one.
func DestroySubvolumeForTest(path string) error {
	fd, err := openDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return destroySubvolume(fd, path, filepath.Base(path), 0)
}
