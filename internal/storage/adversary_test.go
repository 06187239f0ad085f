package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/safefs/safefstest"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/storage/storagetest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

// exportAttack runs as the user who owns args[0], the directory an export
// is written into, until stopped. With args[2] "rename" or "rename+plant",
// every directory that appears there (the export's partial directory, the
// finished export) is renamed aside and replaced by a symbolic link to
// args[1], a directory only root can reach; with "rename+plant" a link is
// also planted at the export's final name as soon as its partial
// directory shows. Always, it tries to get under every directory there,
// swapping each subdirectory it can for a link to args[1].
func exportAttack(stop <-chan struct{}, args []string) string {
	dir, protected, strategy := args[0], args[1], args[2]
	var moved, linked, under, n int
	for {
		select {
		case <-stop:
			return fmt.Sprintf("%s: moved %d directories, planted %d links, swapped %d directories below", strategy, moved, linked, under)
		default:
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			p := filepath.Join(dir, name)
			if !e.IsDir() || strings.HasPrefix(name, ".moved-") {
				continue
			}
			n++
			if subs, err := os.ReadDir(p); err == nil {
				for _, s := range subs {
					sp := filepath.Join(p, s.Name())
					if s.IsDir() && os.Rename(sp, fmt.Sprintf("%s/.moved-%d", p, n)) == nil {
						under++
						_ = os.Symlink(protected, sp)
					}
				}
			}
			if strategy == "under" {
				continue
			}
			if base, _, ok := strings.Cut(strings.TrimPrefix(name, "."), ".partial-"); ok && strategy == "rename+plant" {
				if os.Symlink(protected, filepath.Join(dir, base)) == nil {
					linked++
				}
			}
			if os.Rename(p, filepath.Join(dir, fmt.Sprintf(".moved-%d", n))) == nil {
				moved++
				if os.Symlink(protected, p) == nil {
					linked++
				}
			}
		}
	}
}

// The export race: the other user owns the export's destination parent
// and attacks while CopyDir copies a few thousand files (exportAttack).
// Whatever happens to the export, nothing may be written into the
// protected directory and its mode must not change; a successful export
// is hostfork's complete copy at the destination (without renames, the
// attack can't stop it), and a failed one leaves no directory of
// hostfork's at the destination and says where its partial copy is.
func TestExportRaceWithSymlinkSwaps(t *testing.T) {
	testutil.RequireRoot(t)
	u := safefstest.NewUser(t)
	protected := safefstest.Protected(t)
	before := safefstest.Snapshot(t, protected)
	base := safefstest.SharedDir(t, "/dev/shm")
	src := filepath.Join(base, "src")
	testutil.BuildTree(t, src, 3000)
	for i := 0; i < 30; i++ {
		d := filepath.Join(src, fmt.Sprintf("d%04d", i), "deeper/still")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("deep\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := storagetest.Manifest(t, src)
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	for _, strategy := range []string{"rename+plant", "rename", "under"} {
		attack := u.Start(t, "export", shared, protected, strategy)
		var outcomes []string
		for round := 0; round < 3; round++ {
			dst := filepath.Join(shared, fmt.Sprintf("%s-out%d", strategy, round))
			res, err := storage.CopyDir(ctx, src, dst, storage.CopyOptions{Tolerate: true})
			outcomes = append(outcomes, fmt.Sprintf("%s: files %d failed %d partial %q err %v", filepath.Base(dst), res.Files, res.Failed, res.PartialPath, err))
			var st unix.Stat_t
			lerr := unix.Lstat(dst, &st)
			switch {
			case err == nil && strategy == "under":
				if res.Failed != 0 || res.PartialPath != "" {
					t.Errorf("%s: a successful export reports %+v", dst, res)
				}
				if lerr != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 {
					t.Errorf("%s: after a successful export: mode %o uid %d (%v)", dst, st.Mode, st.Uid, lerr)
				}
				storagetest.SameManifest(t, dst, want, storagetest.Manifest(t, dst))
			case err == nil:
				// The attacker may have renamed the finished export aside
				// already: its owner can.
			case strategy == "under":
				t.Errorf("%s: the attack without renames made the export fail: %v", dst, err)
			default:
				if res.PartialPath == "" && res.Files > 0 {
					t.Errorf("%s: a failed export does not say where its partial copy is: %v", dst, err)
				}
				if lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 {
					t.Errorf("%s: a failed export left a directory of root's at the destination", dst)
				}
			}
		}
		t.Logf("%s\n\t%s", attack.Stop(t), strings.Join(outcomes, "\n\t"))
	}
	if after := safefstest.Snapshot(t, protected); after != before {
		t.Fatalf("the protected directory changed:\n%s\nnow\n%s", before, after)
	}
	// Everything root wrote is inside shared (the attacker only moved it
	// around there).
	err := filepath.WalkDir(shared, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if l, _ := os.Readlink(p); l != protected {
				t.Errorf("unexpected link %s -> %s", p, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A .hostfork-trees planted beside a baseline by the owner of the
// baseline's directory, as a symbolic link, as a directory of their own,
// or as a directory others can write, makes allocation refuse with an
// error that names it and the fix; nothing is written through it.
func TestPlantedAllocationAreaRefused(t *testing.T) {
	testutil.RequireRoot(t)
	u := safefstest.NewUser(t)
	protected := safefstest.Protected(t)
	before := safefstest.Snapshot(t, protected)
	check := func(t *testing.T, b storage.Backend, home, source string) {
		area := filepath.Join(home, ".hostfork-trees")
		dest := filepath.Join(area, "env1-tree")
		for _, c := range []struct {
			name  string
			plant func()
			want  error
			says  string
		}{
			{"symlink", func() { u.Run(t, "ln -s "+protected+" "+area) }, safefs.ErrSymlink, "remove it"},
			{"their directory", func() { u.Run(t, "mkdir -m 700 "+area) }, safefs.ErrUntrusted, fmt.Sprintf("owned by uid %d", u.UID)},
			{"their open directory", func() { u.Run(t, "mkdir -m 777 "+area) }, safefs.ErrUntrusted, fmt.Sprintf("owned by uid %d", u.UID)},
			{"root's group-writable directory", func() {
				if err := os.Mkdir(area, 0o770); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(area, 0o770); err != nil {
					t.Fatal(err)
				}
			}, safefs.ErrUntrusted, "chmod go-w " + area},
		} {
			c.plant()
			_, perr := storage.PoolDir(home, ".hostfork-trees")
			if !errors.Is(perr, c.want) || !strings.Contains(perr.Error(), c.says) || !strings.Contains(perr.Error(), area) {
				t.Errorf("%s: PoolDir: %v, want %v saying %q", c.name, perr, c.want, c.says)
			}
			_, err := b.Prepare(context.Background(), storage.Request{Dest: dest, Source: source})
			if !errors.Is(err, c.want) {
				t.Errorf("%s: Prepare: %v, want %v", c.name, err, c.want)
			}
			t.Logf("%s: %v", c.name, perr)
			if fi, err := os.Lstat(area); err == nil && fi.IsDir() {
				if ents, _ := os.ReadDir(area); len(ents) > 0 {
					t.Errorf("%s: something was written into the planted directory: %s", c.name, ents[0].Name())
				}
			}
			if err := os.RemoveAll(area); err != nil {
				t.Fatal(err)
			}
		}
		// Unplanted, the area is made private and used.
		pool, err := storage.PoolDir(home, ".hostfork-trees")
		if err != nil {
			t.Fatalf("PoolDir: %v", err)
		}
		defer pool.Close()
		tree, err := b.Prepare(context.Background(), storage.Request{Dest: dest, Source: source, Pool: pool})
		if err != nil {
			t.Fatalf("Prepare in the area: %v", err)
		}
		if err := b.Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
		if err := os.Remove(area); err != nil {
			t.Errorf("removing the area: %v", err)
		}
	}
	home := func(t *testing.T, base string) string {
		h := filepath.Join(base, "home")
		if err := os.Mkdir(h, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(h, u.UID, u.GID); err != nil {
			t.Fatal(err)
		}
		return h
	}
	t.Run("copy", func(t *testing.T) {
		h := home(t, safefstest.SharedDir(t, "/dev/shm"))
		src := filepath.Join(h, "baseline")
		writeFiles(t, src, map[string]string{"a": "alpha\n"})
		check(t, storage.Copy{}, h, src)
	})
	t.Run("btrfs", func(t *testing.T) {
		mnt := testutil.LoopBtrfs(t, "")
		if err := os.Chmod(filepath.Dir(mnt), 0o755); err != nil {
			t.Fatal(err)
		}
		h := home(t, mnt)
		src := filepath.Join(h, "baseline")
		if err := storage.CreateSubvolume(src); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(src) })
		writeFiles(t, src, map[string]string{"a": "alpha\n"})
		check(t, storage.Btrfs{}, h, src)
	})
	if after := safefstest.Snapshot(t, protected); after != before {
		t.Fatalf("the protected directory changed:\n%s\nnow\n%s", before, after)
	}
}
