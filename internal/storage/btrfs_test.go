package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/storage/storagetest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBtrfsSnapshotSurvivesBaselineDeletion(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, base, map[string]string{"a": "alpha\n", "d/b": "beta\n"})
	tree, err := storage.Btrfs{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(mnt, "env1"), Source: base})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := (storage.Btrfs{}).Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
	}()
	if err := storage.DestroySubvolumeForTest(base); err != nil {
		t.Fatalf("deleting the baseline: %v", err)
	}
	if _, err := os.Lstat(base); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("baseline still there: %v", err)
	}
	if got := readFile(t, filepath.Join(tree.Path, "d/b")); got != "beta\n" {
		t.Errorf("snapshot file after baseline deletion: %q", got)
	}
	if err := (storage.Btrfs{}).Verify(context.Background(), tree); err != nil {
		t.Errorf("Verify after baseline deletion: %v", err)
	}
	m, err := storage.Reopen(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	if out := storagetest.RunInView(t, m, `cat a; echo more >> a; cat a`); out != "alpha\nalpha\nmore\n" {
		t.Errorf("view after baseline deletion: %q", out)
	}
}

func TestBtrfsIdentity(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(base) })
	if err := storage.CreateSubvolume(base); !errors.Is(err, storage.ErrExists) {
		t.Errorf("CreateSubvolume over an existing one: %v, want ErrExists", err)
	}
	src, err := storage.InspectSubvolume(base)
	if err != nil {
		t.Fatal(err)
	}
	top, err := storage.InspectSubvolume(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if top.ID != 5 {
		t.Errorf("top-level subvolume id %d, want 5", top.ID)
	}
	tree, err := storage.Btrfs{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(mnt, "env"), Source: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := (storage.Btrfs{}).Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	bt := tree.Btrfs
	if bt.SourceID != src.ID || bt.SourceUUID != src.UUID || bt.SourceID < 256 {
		t.Errorf("source identity %d/%s, baseline is %d/%s", bt.SourceID, bt.SourceUUID, src.ID, src.UUID)
	}
	if bt.SubvolumeID <= src.ID || bt.UUID == "" || bt.UUID == src.UUID || bt.Root.Ino != 256 {
		t.Errorf("snapshot identity %+v", bt)
	}
	if bt.Root.FSID == src.Root.FSID {
		t.Errorf("snapshot and baseline share f_fsid %x: it no longer distinguishes subvolumes", bt.Root.FSID)
	}
	if got, err := storage.InspectSubvolume(tree.Path); err != nil || got.ID != bt.SubvolumeID {
		t.Errorf("InspectSubvolume(snapshot) = %+v, %v", got, err)
	}
	if _, err := storage.InspectSubvolume(filepath.Dir(tree.Path)); !errors.Is(err, storage.ErrNotSubvolume) {
		t.Errorf("InspectSubvolume(plain directory): %v, want ErrNotSubvolume", err)
	}
	if _, err := storage.InspectSubvolume(t.TempDir()); !errors.Is(err, storage.ErrNotBtrfs) {
		t.Errorf("InspectSubvolume(ext4 directory): %v, want ErrNotBtrfs", err)
	}
}

func TestBtrfsRefusesUnsuitableSources(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(base) })
	plain := filepath.Join(mnt, "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	other := testutil.LoopBtrfs(t, "")
	ext4 := t.TempDir()
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		source, dest string
		want         error
	}{
		{"plain directory", plain, filepath.Join(mnt, "d1"), storage.ErrNotSubvolume},
		{"source on ext4", ext4, filepath.Join(mnt, "d2"), storage.ErrNotBtrfs},
		{"destination on ext4", base, filepath.Join(ext4, "d3"), storage.ErrNotBtrfs},
		{"another btrfs", base, filepath.Join(other, "d4"), storage.ErrCrossFilesystem},
	} {
		_, err := storage.Btrfs{}.Prepare(ctx, storage.Request{Source: c.source, Dest: c.dest})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if _, serr := os.Lstat(c.dest); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: destination left behind (%v)", c.name, serr)
		}
	}
}

// The non-root removal test re-executes the test binary as nobody.
const removeAsEnv = "HOSTFORK_STORAGE_TEST_REMOVE"

func init() {
	// Runs before TestMain in the re-executed binary only.
	if raw := os.Getenv(removeAsEnv); raw != "" {
		tree, err := unmarshalTree(raw)
		if err == nil {
			err = storage.Btrfs{}.Remove(context.Background(), tree)
		}
		fmt.Printf("not-permitted=%v\n%v\n", errors.Is(err, storage.ErrRemoveNotPermitted), err)
		os.Exit(0)
	}
}

func TestBtrfsNonRootRemoveNeedsUserSubvolRmAllowed(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	// Let nobody reach the loop mount and run a copy of this binary.
	if err := os.Chmod(filepath.Dir(mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(mnt, "storage.test")
	copyExecutable(t, os.Args[0], bin)
	const nobody = 65534
	pool := filepath.Join(mnt, "pool")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(base) })
	writeFiles(t, base, map[string]string{"f": "x"})
	if err := os.Mkdir(pool, 0o755); err != nil {
		t.Fatal(err)
	}
	tree, err := storage.Btrfs{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(pool, "env"), Source: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := (storage.Btrfs{}).Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	for _, p := range []string{pool, tree.Dest, tree.Path} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	removeAs := func() string {
		raw, err := marshalTree(tree)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), removeAsEnv+"="+raw)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("remove as nobody: %v: %s", err, out)
		}
		return string(out)
	}

	out := removeAs()
	t.Logf("non-root Remove: %s", out)
	if !strings.HasPrefix(out, "not-permitted=true\n") || !strings.Contains(out, "user_subvol_rm_allowed") {
		t.Fatalf("non-root Remove without user_subvol_rm_allowed:\n%s", out)
	}
	if err := (storage.Btrfs{}).Verify(context.Background(), tree); err != nil {
		t.Fatalf("tree after the refused removal: %v", err)
	}

	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT, "user_subvol_rm_allowed"); err != nil {
		t.Fatalf("remounting with user_subvol_rm_allowed: %v", err)
	}
	if out := removeAs(); !strings.HasPrefix(out, "not-permitted=false\n<nil>") {
		t.Fatalf("non-root Remove with user_subvol_rm_allowed:\n%s", out)
	}
	if _, err := os.Lstat(tree.Dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("destination after a non-root Remove: %v", err)
	}
}

func copyExecutable(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// A record whose snapshot identity is the baseline's is refused before
// anything is opened, so a corrupted record can't destroy a baseline.
func TestBtrfsRemoveNeverDestroysTheBaseline(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(base) })
	tree, err := storage.Btrfs{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(mnt, "env"), Source: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = (storage.Btrfs{}).Remove(context.Background(), tree) })
	src, err := storage.InspectSubvolume(base)
	if err != nil {
		t.Fatal(err)
	}
	forged := tree
	bt := *tree.Btrfs
	forged.Btrfs = &bt
	bt.SubvolumeID, bt.UUID, bt.Root = src.ID, src.UUID, src.Root
	if err := (storage.Btrfs{}).Remove(context.Background(), forged); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Remove of a record naming the baseline: %v, want ErrIdentityMismatch", err)
	}
	if _, err := storage.InspectSubvolume(base); err != nil {
		t.Errorf("baseline after the refused Remove: %v", err)
	}
}
