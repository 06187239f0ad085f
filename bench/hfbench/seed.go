package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// seedMain fills a store with real retained runs through the library:
// each is Host.Run of 'true' (a stopped environment, an exited command,
// its run directory, logs, receipt, ledger and events), the same as
// 'hostfork run -- true' leaves, without a process start per run. Every
// second run is labelled agent=a1. The binary is its own guardian.
func seedMain(args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	root := fs.String("root", "", "store directory")
	n := fs.Int("n", 10000, "runs to add")
	workers := fs.Int("workers", 2, "runs at a time")
	fs.Parse(args)
	ctx := context.Background()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: *root})
	if err != nil {
		return err
	}
	defer h.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *workers)
	t0 := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				s := spec.Environment{}
				if i%2 == 0 {
					s.Labels = map[string]string{"agent": "a1"}
				}
				p, err := h.Plan(ctx, s)
				if err != nil {
					errs <- err
					return
				}
				c := h.Command("true")
				if _, err := h.Run(ctx, p, c); err != nil {
					errs <- fmt.Errorf("run %d: %w", i, err)
					return
				}
				if _, err := c.WaitTree(ctx); err != nil {
					errs <- fmt.Errorf("run %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("seeded %d runs in %v (%.1f ms a run, %d at a time)\n", *n, time.Since(t0).Round(time.Millisecond),
		float64(time.Since(t0).Milliseconds())/float64(*n)*float64(*workers), *workers)
	return nil
}
