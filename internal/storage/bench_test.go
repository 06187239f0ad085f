package storage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

// benchPrepareRemove measures Prepare + Remove of one tree per iteration
// and reports the two halves separately.
func benchPrepareRemove(b *testing.B, be storage.Backend, src, pool string, mode storage.ReflinkMode) {
	ctx := context.Background()
	var prep, rem time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		tree, err := be.Prepare(ctx, storage.Request{Dest: filepath.Join(pool, "t"+strconv.Itoa(i)), Source: src, Reflink: mode})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := be.Remove(ctx, tree); err != nil {
			b.Fatal(err)
		}
		prep += t1.Sub(t0)
		rem += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(prep.Microseconds())/1000/float64(b.N), "prepare-ms/op")
	b.ReportMetric(float64(rem.Microseconds())/1000/float64(b.N), "remove-ms/op")
}

func BenchmarkPrepareRemove(b *testing.B) {
	testutil.RequireRoot(b)
	for _, n := range testutil.BenchFiles(b, 20000) {
		b.Run(fmt.Sprintf("btrfs/files=%d", n), func(b *testing.B) {
			mnt := testutil.LoopBtrfs(b, "")
			src := filepath.Join(mnt, "baseline")
			if err := storage.CreateSubvolume(src); err != nil {
				b.Fatal(err)
			}
			testutil.BuildTree(b, src, n)
			pool := filepath.Join(mnt, "pool")
			if err := os.Mkdir(pool, 0o755); err != nil {
				b.Fatal(err)
			}
			unix.Sync()
			benchPrepareRemove(b, storage.Btrfs{}, src, pool, "")
			_ = storage.DestroySubvolumeForTest(src)
		})
		b.Run(fmt.Sprintf("overlay-tmpfs/files=%d", n), func(b *testing.B) {
			dir := tmpfsDir(b)
			src := filepath.Join(dir, "lower")
			testutil.BuildTree(b, src, n)
			benchPrepareRemove(b, storage.Overlay{}, src, dir, "")
		})
		b.Run(fmt.Sprintf("copy-tmpfs/files=%d", n), func(b *testing.B) {
			dir := tmpfsDir(b)
			src := filepath.Join(dir, "src")
			testutil.BuildTree(b, src, n)
			benchPrepareRemove(b, storage.Copy{}, src, dir, storage.ReflinkAuto)
		})
		b.Run(fmt.Sprintf("copy-btrfs-reflink/files=%d", n), func(b *testing.B) {
			mnt := testutil.LoopBtrfs(b, "")
			src := filepath.Join(mnt, "src")
			testutil.BuildTree(b, src, n)
			unix.Sync()
			benchPrepareRemove(b, storage.Copy{}, src, mnt, storage.ReflinkAlways)
		})
	}
}

// BenchmarkViewMount measures applying and unmounting a tree's mounts in a
// private mount namespace (a locked OS thread that unshared its namespace
// and is discarded afterwards), as the keeper will.
func BenchmarkViewMount(b *testing.B) {
	testutil.RequireRoot(b)
	for _, n := range testutil.BenchFiles(b, 20000) {
		dir := tmpfsDir(b)
		src := filepath.Join(dir, "lower")
		testutil.BuildTree(b, src, n)
		for _, be := range []storage.Backend{storage.Overlay{}, storage.Copy{}} {
			tree, err := be.Prepare(context.Background(), storage.Request{Dest: filepath.Join(dir, string(be.Kind())), Source: src})
			if err != nil {
				b.Fatal(err)
			}
			ms, err := be.Mounts(tree)
			if err != nil {
				b.Fatal(err)
			}
			name := "overlay"
			if be.Kind() == storage.KindCopy {
				name = "bind"
			}
			b.Run(fmt.Sprintf("%s/files=%d", name, n), func(b *testing.B) {
				target := b.TempDir()
				done := make(chan error)
				go func() {
					// Never unlocked: the thread, and its namespace,
					// end with this goroutine.
					runtime.LockOSThread()
					if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
						done <- err
						return
					}
					if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
						done <- err
						return
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						for _, m := range ms {
							if err := m.Apply(target); err != nil {
								done <- err
								return
							}
						}
						if err := storage.Unmount(target, 0); err != nil {
							done <- err
							return
						}
					}
					b.StopTimer()
					done <- nil
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
			if err := be.Remove(context.Background(), tree); err != nil {
				b.Fatal(err)
			}
		}
	}
}
