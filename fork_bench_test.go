package hostfork_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// BenchmarkForkBtrfs20k forks an environment whose btrfs tree holds 20,000
// files, with a command running in it (so the freeze is real), into 10
// children, side by side with the bare operation: 10 snapshots of the
// same subvolume. Reported medians: "ms/fork" (Env.Fork, whole),
// "ms/frozen" (the parent's freeze window, as recorded) and "ms/bare-10-snapshots".
// Targets (issue 37): fork ≤ 300 ms, frozen ≤ 50 ms. Run with e.g.
//
//	go test -run '^$' -bench ForkBtrfs20k -benchtime 5x .
func BenchmarkForkBtrfs20k(b *testing.B) {
	mnt := testutil.LoopBtrfs(b, "")
	h := newHost(b)
	ctx := context.Background()
	base := btrfsBaseline(b, mnt, nil)
	for d := 0; d < 100; d++ {
		dir := filepath.Join(base, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 200; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte("some content\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	name := testutil.UniqueName("bench")
	if _, err := h.AddBaseline(ctx, name, base); err != nil {
		b.Fatal(err)
	}
	target := b.TempDir()
	env := benchEnv(b, h, spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindBtrfs, Baseline: name}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	})
	sleeper := env.Command("sleep", "600")
	if err := sleeper.Start(ctx); err != nil {
		b.Fatal(err)
	}
	waitWorkload(b, sleeper)
	parentTree := storageTree(env.Record().Trees[0])
	pool, err := storage.PoolDir(mnt, "bare")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	var fork, frozen, bare durations
	for i := 0; i < b.N; i++ {
		start := time.Now()
		kids, err := env.Fork(ctx, hostfork.ForkOptions{Count: 10})
		fork = append(fork, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		frozen = append(frozen, time.Duration(kids[0].Record().Fork.FrozenFor))
		b.StopTimer()
		for _, k := range kids {
			if err := k.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
				b.Fatal(err)
			}
			removeTrees(b, h, k.ID())
		}
		b.StartTimer()
		// The bare operation: 10 snapshots of the parent's snapshot.
		start = time.Now()
		var made []storage.Tree
		for j := 0; j < 10; j++ {
			t, err := storage.Btrfs{}.Prepare(ctx, storage.Request{Dest: filepath.Join(pool.Path(), fmt.Sprintf("s%d-%d", i, j)), Source: parentTree.Path, Pool: pool})
			if err != nil {
				b.Fatal(err)
			}
			made = append(made, t)
		}
		bare = append(bare, time.Since(start))
		b.StopTimer()
		for _, t := range made {
			if err := (storage.Btrfs{}).Remove(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	fork.report(b, "ms/fork")
	frozen.report(b, "ms/frozen")
	bare.report(b, "ms/bare-10-snapshots")
}

// BenchmarkForkOverlayXFS forks a stopped environment whose overlay upper
// holds 100 MiB on XFS with reflink into one child, side by side with the
// bare operation (cp -a --reflink=always of the upper). Reported medians:
// "ms/fork" and "ms/bare-cp-reflink". Target (issue 37): fork ≤ 200 ms.
func BenchmarkForkOverlayXFS(b *testing.B) {
	mnt := testutil.LoopXFS(b)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: filepath.Join(mnt, "store"), CgroupParent: testutil.CgroupParent(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	ctx := context.Background()
	lower := filepath.Join(mnt, "lower")
	writeFiles(b, lower, map[string]string{"a": "a\n"})
	target := b.TempDir()
	env := benchEnv(b, h, spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:  spec.View{Replace: map[string]string{target: "proj"}},
	})
	cmd := env.Command("sh", "-c", "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10485760 /dev/urandom > big$i; done")
	cmd.Cwd = target
	if err := cmd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := cmd.WaitTree(ctx); err != nil {
		b.Fatal(err)
	}
	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		b.Fatal(err)
	}
	upper := env.Record().Trees[0].HostPath
	var fork, bare durations
	for i := 0; i < b.N; i++ {
		start := time.Now()
		kids, err := env.Fork(ctx, hostfork.ForkOptions{Count: 1})
		fork = append(fork, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if st := storageTree(kids[0].Record().Trees[0]); st.Overlay.UpperCopy.Reflink != storage.ReflinkAll {
			b.Fatalf("the upper was not cloned: %+v", st.Overlay.UpperCopy)
		}
		for _, k := range kids {
			if err := k.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
				b.Fatal(err)
			}
			removeTrees(b, h, k.ID())
		}
		dst := filepath.Join(mnt, fmt.Sprintf("bare%d", i))
		b.StartTimer()
		start = time.Now()
		if out, err := exec.Command("cp", "-a", "--reflink=always", upper, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		bare = append(bare, time.Since(start))
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	fork.report(b, "ms/fork")
	bare.report(b, "ms/bare-cp-reflink")
}
