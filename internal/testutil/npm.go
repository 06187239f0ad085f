package testutil

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NPMTools is the directory where .ci/run installs the pinned npm
// packages of .ci/npm/package.json (HOSTFORK_NPM_TOOLS overrides it). Each
// of need, a path under its node_modules (".bin/redocly",
// "e2b/package.json"), must be there and node on PATH; otherwise the test
// skips (fails under HOSTFORK_TEST_STRICT=1).
func NPMTools(t testing.TB, need ...string) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("HOSTFORK_NPM_TOOLS"), "/var/cache/hostfork-ci/npm")
	for _, p := range need {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p)); err != nil {
			Skip(t, p+" not installed under "+filepath.Join(dir, "node_modules")+" (bash .ci/run installs .ci/npm/package.json there)")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		Skip(t, "node not found (apt-get install nodejs npm)")
	}
	return dir
}
