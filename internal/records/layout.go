package records

import (
	"path/filepath"
	"strings"
)

// The subgroups of an environment's cgroup: its commands' groups, the
// guardians (only guardians are started there) and the keeper.
const (
	CommandsGroup  = "commands"
	GuardiansGroup = "guardians"
	KeeperGroup    = "keeper"
)

// PoolName is the allocation area beside a Btrfs source.
const PoolName = ".hostfork-trees"

// IsAllocationDest reports whether p is a tree destination hostfork
// allocates for envID: <root>/trees/<env>-<tree> or
// <dir>/.hostfork-trees/<env>-<tree> (see treeDest).
func IsAllocationDest(root, envID, p string) bool {
	if filepath.Clean(p) != p || !strings.HasPrefix(filepath.Base(p), envID+"-") {
		return false
	}
	dir := filepath.Dir(p)
	return dir == filepath.Join(root, "trees") || filepath.Base(dir) == PoolName
}
