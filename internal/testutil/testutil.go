// Package testutil holds real-kernel test helpers: skips that turn into
// failures under HOSTFORK_TEST_STRICT=1, unique cgroup parents and store
// roots that are removed when the test ends (also when it fails). Only
// _test.go files import it.
package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
)

// Strict reports whether skipped capabilities must fail the test instead.
func Strict() bool { return os.Getenv("HOSTFORK_TEST_STRICT") == "1" }

// Skip skips the test with reason, or fails it under HOSTFORK_TEST_STRICT=1.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("HOSTFORK_TEST_STRICT=1 and the test can't run: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root")
	}
}

// UniqueName returns prefix-<random hex>.
func UniqueName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// CgroupParent creates a unique hostfork-test-* group under the writable
// cgroup2 mount and removes it (killing anything left inside) at cleanup.
func CgroupParent(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	m, err := cgroup.FindMount()
	if err != nil {
		Skip(t, err.Error())
	}
	p := filepath.Join(m.Path, UniqueName("hostfork-test"))
	if _, err := cgroup.Create(p); err != nil {
		Skip(t, "can't create a test cgroup: "+err.Error())
	}
	t.Cleanup(func() { RemoveCgroupTree(t, p) })
	return p
}

// RemoveCgroupTree kills everything under p and removes the groups.
func RemoveCgroupTree(t testing.TB, p string) {
	g := cgroup.Open(p)
	if !g.Exists() {
		return
	}
	_ = g.Kill()
	// t.Context is already cancelled while cleanups run: wait on our own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.WaitEmpty(ctx)
	if err := g.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cleanup: %v", err)
	}
	if err := RemoveV1Mirrors(p); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}
