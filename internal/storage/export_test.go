package storage

import (
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// DestroySubvolumeForTest deletes the subvolume at path by name. Tests use
// it to delete a baseline; the package itself never deletes one.
func DestroySubvolumeForTest(path string) error {
	d, err := safefs.OpenDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return destroySubvolume(d.Fd(), path, filepath.Base(path), 0)
}
