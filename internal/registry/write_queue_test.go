package registry

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A write transaction that reads through the connection pool (as stopping
// an environment does with Intents) must get a connection while many other
// writers of the same process wait for it. When waiting writers each held
// a pooled connection inside BEGIN IMMEDIATE, the pool's four connections
// could all be taken, and the read stalled until the busy timeout (30 s),
// failing the waiters with "database is locked".
func TestWriterReadsWhileOthersWait(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 9)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- d.Write(ctx, func(tx *Tx) error {
			close(entered)
			<-release
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := d.Intents(rctx, ""); err != nil {
				return fmt.Errorf("reading through the pool inside a write: %w", err)
			}
			return nil
		})
	}()
	<-entered
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- d.Write(ctx, func(tx *Tx) error {
				_, err := tx.AddIntent("env", "", "dir", fmt.Sprint("/target/", i))
				return err
			})
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the other writers queue up
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
