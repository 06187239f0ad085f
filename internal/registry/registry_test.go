package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestCompareAndSet(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	e := &Env{ID: "abc123", State: EnvActive, CreatedAt: time.Now()}
	if err := d.Write(ctx, func(tx *Tx) error { return tx.InsertEnv(e) }); err != nil {
		t.Fatal(err)
	}
	a, _ := d.Env(ctx, "abc123")
	b, _ := d.Env(ctx, "abc123")
	a.StopReason = "user"
	if err := d.Write(ctx, func(tx *Tx) error { return tx.UpdateEnv(a) }); err != nil {
		t.Fatal(err)
	}
	b.StopReason = "deadline"
	err := d.Write(ctx, func(tx *Tx) error { return tx.UpdateEnv(b) })
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("late writer not fenced: %v", err)
	}
	got, _ := d.Env(ctx, "abc123")
	if got.StopReason != "user" || got.Rev != 2 {
		t.Fatalf("got %+v", got)
	}
}

func TestResolvePrefix(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	err := d.Write(ctx, func(tx *Tx) error {
		if err := tx.InsertEnv(&Env{ID: "aa11", State: EnvActive, CreatedAt: time.Now()}); err != nil {
			return err
		}
		if err := tx.InsertEnv(&Env{ID: "aa22", State: EnvActive, CreatedAt: time.Now()}); err != nil {
			return err
		}
		return tx.InsertCommand(&Command{ID: "bb11", EnvID: "aa11", State: CmdRunning, CreatedAt: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	if k, id, err := d.Resolve(ctx, "b"); err != nil || k != "command" || id != "bb11" {
		t.Fatalf("%s %s %v", k, id, err)
	}
	if _, _, err := d.Resolve(ctx, "aa"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("want ambiguous, got %v", err)
	}
	if _, _, err := d.Resolve(ctx, "zz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("want not found, got %v", err)
	}
	if _, _, err := d.Resolve(ctx, "%"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LIKE wildcard was not escaped: %v", err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d, err := Open(ctx, root) // separate handles, like separate processes
			if err != nil {
				errs <- err
				return
			}
			defer d.Close()
			errs <- d.Write(ctx, func(tx *Tx) error {
				return tx.InsertEnv(&Env{ID: fmt.Sprintf("e%03d", i), State: EnvActive, CreatedAt: time.Now()})
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	d := open(t)
	d2, _ := Open(ctx, root)
	defer d2.Close()
	envs, err := d2.Envs(ctx, EnvFilter{})
	if err != nil || len(envs) != 50 {
		t.Fatalf("%d envs, %v", len(envs), err)
	}
	_ = d
}

func TestIntents(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	var id int64
	err := d.Write(ctx, func(tx *Tx) error {
		var err error
		id, err = tx.AddIntent("e1", "", "cgroup", "/sys/fs/cgroup/x")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := d.Intents(ctx, "", IntentPending)
	if len(p) != 1 {
		t.Fatalf("pending %v", p)
	}
	if err := d.Write(ctx, func(tx *Tx) error { return tx.SettleIntent(id, IntentCreated, `{"inode":5}`, "") }); err != nil {
		t.Fatal(err)
	}
	p, _ = d.Intents(ctx, "e1")
	if len(p) != 1 || p[0].State != IntentCreated || p[0].Identity == "" {
		t.Fatalf("%+v", p)
	}
}
