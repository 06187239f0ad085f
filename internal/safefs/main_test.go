package safefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs/safefstest"
)

func TestMain(m *testing.M) {
	safefstest.Main(map[string]safefstest.Attack{"swap-inside": swapInside})
	os.Exit(m.Run())
}

// swapInside runs as another user: over and over, it walks the tree at
// args[0] and, in every directory it can write, renames each
// subdirectory aside and puts a symbolic link to args[1] (a directory
// only root can reach) in its place, and adds more such links.
func swapInside(stop <-chan struct{}, args []string) string {
	tree, protected := args[0], args[1]
	var renamed, linked, n int
	for {
		select {
		case <-stop:
			return fmt.Sprintf("renamed %d directories, planted %d symbolic links", renamed, linked)
		default:
		}
		_ = filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == tree {
				return nil
			}
			n++
			if os.Rename(p, fmt.Sprintf("%s.moved-%d", p, n)) == nil {
				renamed++
				if os.Symlink(protected, p) == nil {
					linked++
				}
			}
			if os.Symlink(protected, fmt.Sprintf("%s.link-%d", p, n)) == nil {
				linked++
			}
			return nil
		})
	}
}
