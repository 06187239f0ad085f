package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// TestBtrfsScripts runs the scripts in testdata/btrfs, which need a Btrfs
// filesystem: one loop filesystem is made for the whole test and removed
// at its end (also when it fails). Each script gets what TestScripts gives
// (the same store, cgroup parent, mark and commands), and $BTRFS (a directory of its own on that filesystem)
// and $BASE (an empty subvolume in it, to fill and register as a
// baseline).
func TestBtrfsScripts(t *testing.T) {
	testutil.RequireRoot(t)
	m, err := cgroup.FindMount()
	if err != nil {
		testutil.Skip(t, "no writable cgroup2 mount: "+err.Error())
	}
	if _, err := exec.LookPath("btrfs"); err != nil {
		testutil.Skip(t, "btrfs (btrfs-progs) not found; the scripts use it to delete a baseline")
	}
	mnt := testutil.LoopBtrfs(t, "")
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "btrfs"),
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			if err := scriptEnv(env, m); err != nil {
				return err
			}
			// Trees of a btrfs baseline are made next to it, in this
			// script's own directory; they go with the loop filesystem.
			dir := filepath.Join(mnt, testutil.UniqueName("script"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			base := filepath.Join(dir, "base")
			if err := storage.CreateSubvolume(base); err != nil {
				return err
			}
			env.Setenv("BTRFS", dir)
			env.Setenv("BASE", base)
			return nil
		},
		Cmds: scriptCmds,
	})
}
