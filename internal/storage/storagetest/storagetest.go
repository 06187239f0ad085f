// Package storagetest is the conformance suite every storage backend runs,
// and the helper that applies a tree's mounts inside a private mount
// namespace of a re-executed test binary. Only _test.go files import it.
package storagetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"golang.org/x/sys/unix"
)

// Fixture is what a backend supplies to each conformance test.
type Fixture struct {
	Backend storage.Backend
	// Source is an empty directory the suite fills and then uses as the
	// baseline (for btrfs, an empty subvolume).
	Source string
	// Pool is an existing private directory (owned by root, writable by
	// nobody else, reached without symbolic links) in which the suite
	// names destinations (for btrfs, on the same filesystem as Source).
	Pool string
	// Reflink is passed in every Request.
	Reflink storage.ReflinkMode
	// AfterFill, if set, runs once the suite has filled Source (a
	// worktree's fixture commits it).
	AfterFill func(t *testing.T, source string)
	// Skip names the tests that don't fit the backend, with the reason.
	Skip map[string]string
	// Remove, if set, is how the suite removes a tree it wrote into at
	// cleanup (a worktree's: forced, its branch deleted); nil is
	// Backend.Remove.
	Remove func(ctx context.Context, t storage.Tree) error
	// SourceMeta, if set, is a name at the top of Source that the backend
	// itself writes (a repository's .git, where git records worktrees),
	// left out when the baseline is compared.
	SourceMeta string
}

func (f Fixture) remove(ctx context.Context, t storage.Tree) error {
	if f.Remove != nil {
		return f.Remove(ctx, t)
	}
	return f.Backend.Remove(ctx, t)
}

// baseline is Manifest of f.Source without f.SourceMeta.
func (f Fixture) baseline(t testing.TB) map[string]string {
	t.Helper()
	m := Manifest(t, f.Source)
	if f.SourceMeta != "" {
		for k := range m {
			if k == f.SourceMeta || strings.HasPrefix(k, f.SourceMeta+"/") {
				delete(m, k)
			}
		}
	}
	return m
}

// Run runs the conformance suite. newFixture is called once per subtest
// and must arrange its own cleanup.
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f Fixture)
	}{
		{"PrepareWriteReopen", testPrepareWriteReopen},
		{"TwoTreesIsolated", testTwoTreesIsolated},
		{"RemoveIdempotent", testRemoveIdempotent},
		{"ExclusiveDestination", testExclusiveDestination},
		{"IdentityMismatchRefusesRemoval", testIdentityMismatch},
		{"BadRequests", testBadRequests},
		{"WrongKind", testWrongKind},
		{"MetadataSurvives", testMetadataSurvives},
		{"AllocationArea", testAllocationArea},
		{"OpenPinsParts", testOpenPinsParts},
		{"Fork", testFork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if why, ok := f.Skip[tc.name]; ok {
				t.Skip(why)
			}
			fill(t, f.Source)
			if f.AfterFill != nil {
				f.AfterFill(t, f.Source)
			}
			tc.fn(t, f)
		})
	}
}

// fill writes the baseline: files, a nested directory, an empty directory,
// an executable and a symlink.
func fill(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"a.txt":         "alpha\n",
		"dir/b.txt":     "beta\n",
		"dir/sub/c.txt": "gamma\n",
		"bin/run.sh":    "#!/bin/sh\necho run\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

// Manifest describes a tree by path: type, mode, size, mtime, content hash
// or link target. Two equal manifests mean an unchanged tree.
func Manifest(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		desc := []string{
			strings.TrimSpace(unixModeString(st.Mode)),
			strconv.FormatInt(st.Size, 10),
			strconv.FormatInt(st.Mtim.Nano(), 10),
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			desc = append(desc, hex.EncodeToString(h[:8]))
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc = append(desc, "-> "+l)
		case unix.S_IFDIR:
			desc[1] = "" // directory sizes differ between filesystems
		}
		m[rel] = strings.Join(desc, " ")
		return nil
	})
	if err != nil {
		t.Fatalf("manifest of %s: %v", dir, err)
	}
	return m
}

func unixModeString(m uint32) string { return "mode " + strconv.FormatUint(uint64(m), 10) }

// SameManifest fails the test when two manifests differ.
func SameManifest(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s was %q, now %q", what, k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s appeared (%q)", what, k, v)
		}
	}
}

// Prepare prepares a tree at pool/name and removes it at cleanup.
func Prepare(t testing.TB, f Fixture, name string) storage.Tree {
	t.Helper()
	tree, err := f.Backend.Prepare(context.Background(), request(f, filepath.Join(f.Pool, name)))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() {
		if err := f.remove(context.Background(), tree); err != nil {
			t.Errorf("cleanup: Remove(%s): %v", tree.Dest, err)
		}
	})
	return tree
}

func request(f Fixture, dest string) storage.Request {
	return storage.Request{Dest: dest, Source: f.Source, Reflink: f.Reflink}
}

func mounts(t testing.TB, f Fixture, tree storage.Tree) []storage.Mount {
	t.Helper()
	m, err := f.Backend.Mounts(tree)
	if err != nil {
		t.Fatalf("Mounts: %v", err)
	}
	return m
}

func expect(t testing.TB, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func testPrepareWriteReopen(t *testing.T, f Fixture) {
	before := Manifest(t, f.Source)
	tree := Prepare(t, f, "t1")
	if tree.Kind != f.Backend.Kind() {
		t.Errorf("tree kind %q from the %q backend", tree.Kind, f.Backend.Kind())
	}
	if err := f.Backend.Verify(context.Background(), tree); err != nil {
		t.Fatalf("Verify after Prepare: %v", err)
	}
	out := RunInView(t, mounts(t, f, tree), `
		cat a.txt dir/sub/c.txt; ./bin/run.sh; readlink link; test -d empty
		echo changed > a.txt; echo new > new.txt; rm dir/b.txt; mkdir made
		cat a.txt`)
	expect(t, "first view", out, "alpha\ngamma\nrun\na.txt\nchanged\n")
	SameManifest(t, "baseline after writes in the tree", before, Manifest(t, f.Source))

	// The record survives serialisation and presents the same tree again.
	raw, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var again storage.Tree
	if err := json.Unmarshal(raw, &again); err != nil {
		t.Fatal(err)
	}
	m, err := storage.Reopen(context.Background(), again)
	if err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	out = RunInView(t, m, `cat a.txt new.txt; test ! -e dir/b.txt; test -d made; echo ok`)
	expect(t, "reopened view", out, "changed\nnew\nok\n")
}

// testFork: storage.Fork of a written tree starts as that tree (changes,
// deletions and directories made again included, seen through a view),
// and the two are independent afterwards; the baseline is untouched.
func testFork(t *testing.T, f Fixture) {
	before := f.baseline(t)
	parent := Prepare(t, f, "parent")
	RunInView(t, mounts(t, f, parent), `echo changed > a.txt; echo new > new.txt; rm dir/b.txt; rm -r dir/sub; mkdir dir/sub; echo fresh > dir/sub/f.txt`)
	child, err := storage.Fork(context.Background(), parent, request(f, filepath.Join(f.Pool, "child")))
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() {
		if err := f.remove(context.Background(), child); err != nil {
			t.Errorf("cleanup: Remove(%s): %v", child.Dest, err)
		}
	})
	if child.Kind != parent.Kind || child.Dest == parent.Dest {
		t.Fatalf("fork record: %+v", child)
	}
	if err := f.Backend.Verify(context.Background(), child); err != nil {
		t.Fatalf("Verify of the fork: %v", err)
	}
	const look = `cat a.txt new.txt dir/sub/f.txt; ls dir/sub; test ! -e dir/b.txt && echo no-b`
	expect(t, "the fork's view", RunInView(t, mounts(t, f, child), look), "changed\nnew\nfresh\nf.txt\nno-b\n")
	expect(t, "write in the fork", RunInView(t, mounts(t, f, child), `echo child > a.txt; cat a.txt`), "child\n")
	expect(t, "the parent after", RunInView(t, mounts(t, f, parent), `cat a.txt`), "changed\n")
	SameManifest(t, "baseline", before, f.baseline(t))
	if _, err := storage.Fork(context.Background(), parent, request(f, filepath.Join(f.Pool, "child"))); !errors.Is(err, storage.ErrExists) {
		t.Errorf("Fork onto an existing destination: %v, want ErrExists", err)
	}
}

func testTwoTreesIsolated(t *testing.T, f Fixture) {
	before := f.baseline(t)
	t1 := Prepare(t, f, "one")
	t2 := Prepare(t, f, "two")
	expect(t, "write in one", RunInView(t, mounts(t, f, t1), `echo one > a.txt; touch only-one; cat a.txt`), "one\n")
	expect(t, "two before", RunInView(t, mounts(t, f, t2), `cat a.txt; test ! -e only-one; echo two > a.txt; cat a.txt`), "alpha\ntwo\n")
	expect(t, "one after", RunInView(t, mounts(t, f, t1), `cat a.txt`), "one\n")
	SameManifest(t, "baseline", before, f.baseline(t))
}

func testRemoveIdempotent(t *testing.T, f Fixture) {
	before := Manifest(t, f.Source)
	tree, err := f.Backend.Prepare(context.Background(), request(f, filepath.Join(f.Pool, "gone")))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	RunInView(t, mounts(t, f, tree), `echo x > a.txt; mkdir -p deep/er; echo y > deep/er/f`)
	for i := 0; i < 2; i++ {
		if err := f.Backend.Remove(context.Background(), tree); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if _, err := os.Lstat(tree.Dest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("destination after Remove: %v", err)
	}
	if err := f.Backend.Verify(context.Background(), tree); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Verify after Remove: %v, want not-exist", err)
	}
	SameManifest(t, "baseline after Remove", before, Manifest(t, f.Source))
	// Listing entries of the pool shows nothing left behind.
	ents, err := os.ReadDir(f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left in the pool: %s", e.Name())
	}
}

func testExclusiveDestination(t *testing.T, f Fixture) {
	dest := filepath.Join(f.Pool, "taken")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dest, "marker")
	if err := os.WriteFile(marker, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := f.Backend.Prepare(context.Background(), request(f, dest))
	if !errors.Is(err, storage.ErrExists) || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Prepare over an existing directory: %v, want ErrExists", err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "mine" {
		t.Errorf("existing destination was touched: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(dest)
	if len(ents) != 1 {
		t.Errorf("existing destination now has %d entries", len(ents))
	}

	// A prepared tree's destination is not re-allocated either.
	tree := Prepare(t, f, "first")
	if _, err := f.Backend.Prepare(context.Background(), request(f, tree.Dest)); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second Prepare at %s: %v, want ErrExists", tree.Dest, err)
	}
	if err := f.Backend.Verify(context.Background(), tree); err != nil {
		t.Errorf("first tree after a refused second Prepare: %v", err)
	}
	// A symlink at the destination is not followed.
	link := filepath.Join(f.Pool, "link")
	if err := os.Symlink(filepath.Join(f.Pool, "nowhere"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Backend.Prepare(context.Background(), request(f, link)); !errors.Is(err, storage.ErrExists) {
		t.Errorf("Prepare at a dangling symlink: %v, want ErrExists", err)
	}
	if _, err := os.Lstat(filepath.Join(f.Pool, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Prepare followed the symlink: %v", err)
	}
}

func testIdentityMismatch(t *testing.T, f Fixture) {
	ctx := context.Background()
	a := Prepare(t, f, "a")
	b := Prepare(t, f, "b")
	RunInView(t, mounts(t, f, b), `echo b > a.txt`)
	bWant := RunInView(t, mounts(t, f, b), `cat a.txt`)

	// 1. The whole destination replaced: a's path now holds b's tree.
	aside := a.Dest + ".aside"
	rename(t, a.Dest, aside)
	rename(t, b.Dest, a.Dest)
	if err := f.Backend.Remove(ctx, a); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Remove with a replaced destination: %v, want ErrIdentityMismatch", err)
	}
	if err := f.Backend.Verify(ctx, a); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Verify with a replaced destination: %v, want ErrIdentityMismatch", err)
	}
	if _, err := storage.Reopen(ctx, a); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Reopen with a replaced destination: %v, want ErrIdentityMismatch", err)
	}
	if o, err := f.Backend.Open(ctx, a); !errors.Is(err, storage.ErrIdentityMismatch) {
		o.Close()
		t.Errorf("Open with a replaced destination: %v, want ErrIdentityMismatch", err)
	}
	rename(t, a.Dest, b.Dest)
	rename(t, aside, a.Dest)

	// 2. The contents replaced: a's destination holds b's entries.
	exchangeEntries(t, a.Dest, b.Dest)
	if err := f.Backend.Remove(ctx, a); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Remove with swapped contents: %v, want ErrIdentityMismatch", err)
	}
	if err := f.Backend.Verify(ctx, b); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Verify with swapped contents: %v, want ErrIdentityMismatch", err)
	}
	exchangeEntries(t, a.Dest, b.Dest)

	// Nothing of b was deleted by the refused removals.
	if err := f.Backend.Verify(ctx, b); err != nil {
		t.Fatalf("b after refused removals: %v", err)
	}
	expect(t, "b's content", RunInView(t, mounts(t, f, b), `cat a.txt`), bWant)

	// 3. A forged record: a's record pointing at b's destination.
	// (Unmarshal into a fresh value: a copy of a shares its pointers.)
	var forged storage.Tree
	raw, _ := json.Marshal(a)
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(raw), a.Dest, b.Dest)), &forged); err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.Remove(ctx, forged); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Remove of a forged record: %v, want ErrIdentityMismatch", err)
	}
	if err := f.Backend.Verify(ctx, b); err != nil {
		t.Fatalf("b after a forged removal: %v", err)
	}
}

func rename(t testing.TB, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// exchangeEntries atomically swaps every same-named entry of two
// directories (renameat2 RENAME_EXCHANGE).
func exchangeEntries(t testing.TB, a, b string) {
	t.Helper()
	ents, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pa, pb := filepath.Join(a, e.Name()), filepath.Join(b, e.Name())
		if err := unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_EXCHANGE); err != nil {
			t.Fatalf("exchanging %s and %s: %v", pa, pb, err)
		}
	}
}

func testBadRequests(t *testing.T, f Fixture) {
	ctx := context.Background()
	b := f.Backend
	if _, err := b.Prepare(ctx, storage.Request{Dest: "relative/dest", Source: f.Source}); !errors.Is(err, storage.ErrInvalidRequest) {
		t.Errorf("relative destination: %v, want ErrInvalidRequest", err)
	}
	dest := filepath.Join(f.Pool, "bad")
	if _, err := b.Prepare(ctx, storage.Request{Dest: dest, Source: filepath.Join(f.Pool, "missing")}); err == nil {
		t.Errorf("missing source: no error")
	}
	inside := filepath.Join(f.Source, "dest")
	if _, err := b.Prepare(ctx, storage.Request{Dest: inside, Source: f.Source, Reflink: f.Reflink}); !errors.Is(err, storage.ErrInvalidRequest) {
		t.Errorf("destination inside the source: %v, want ErrInvalidRequest", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Prepare(cctx, request(f, dest)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	for _, p := range []string{dest, inside} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused Prepare left %s: %v", p, err)
		}
	}
}

func testWrongKind(t *testing.T, f Fixture) {
	tree := Prepare(t, f, "kind")
	other := tree
	for _, k := range []storage.Kind{storage.KindBtrfs, storage.KindOverlay, storage.KindCopy} {
		if k != tree.Kind {
			other.Kind = k
		}
	}
	if err := f.Backend.Remove(context.Background(), other); !errors.Is(err, storage.ErrWrongKind) {
		t.Errorf("Remove of a %s record by the %s backend: %v, want ErrWrongKind", other.Kind, tree.Kind, err)
	}
	if _, err := f.Backend.Mounts(other); !errors.Is(err, storage.ErrWrongKind) {
		t.Errorf("Mounts of a %s record: %v, want ErrWrongKind", other.Kind, err)
	}
	if err := f.Backend.Verify(context.Background(), tree); err != nil {
		t.Errorf("tree after a refused Remove: %v", err)
	}
}

// testOpenPinsParts: Open keeps the verified parts open, so a destination
// renamed away and replaced after Open does not change what would be
// mounted: the descriptors still name the original directories.
func testOpenPinsParts(t *testing.T, f Fixture) {
	ctx := context.Background()
	a := Prepare(t, f, "a")
	o, err := f.Backend.Open(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if len(o.Files) == 0 {
		t.Fatal("Open returned no descriptors")
	}
	var before []unix.Stat_t
	for _, file := range o.Files {
		var st unix.Stat_t
		if err := unix.Fstat(int(file.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		before = append(before, st)
	}
	ms := o.Mounts(func(i int) string { return "/proc/self/fd/" + string(rune('0'+i)) })
	if len(ms) == 0 {
		t.Fatal("Open gave no mounts")
	}
	for _, m := range ms {
		if strings.Contains(m.Source+strings.Join(m.Options, ","), a.Dest) {
			t.Errorf("a mount still names the destination by path: %+v", m)
		}
	}
	aside := a.Dest + ".aside"
	rename(t, a.Dest, aside)
	if err := os.MkdirAll(filepath.Join(a.Dest, "tree"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i, file := range o.Files {
		var st unix.Stat_t
		if err := unix.Fstat(int(file.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != before[i].Ino || st.Dev != before[i].Dev {
			t.Errorf("descriptor %d changed identity after the swap", i)
		}
	}
	if err := os.RemoveAll(a.Dest); err != nil {
		t.Fatal(err)
	}
	rename(t, aside, a.Dest)
}
