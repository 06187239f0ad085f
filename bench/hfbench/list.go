package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork"
)

// listMain times the library's listings on an existing store, interleaved:
// what 'hostfork ps', 'ps --all', 'envs' and 'envs --all' ask for, minus
// the process start and the printing.
func listMain(args []string) error {
	fs := flag.NewFlagSet("list", flag.ExitOnError)
	root := fs.String("root", "", "store directory")
	n := fs.Int("n", 20, "samples per call")
	fs.Parse(args)
	ctx := context.Background()
	t0 := time.Now()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: *root})
	if err != nil {
		return err
	}
	defer h.Close()
	open := ms(time.Since(t0))
	calls := []struct {
		name string
		fn   func() (int, error)
	}{
		{"Host.Commands(Live) = ps", func() (int, error) {
			r, err := h.Commands(ctx, hostfork.CommandFilter{Live: true})
			return len(r), err
		}},
		{"Host.Commands(all) = ps --all", func() (int, error) {
			r, err := h.Commands(ctx, hostfork.CommandFilter{})
			return len(r), err
		}},
		{"Host.Commands(all, Brief) = ps --all (table)", func() (int, error) {
			r, err := h.Commands(ctx, hostfork.CommandFilter{Brief: true})
			return len(r), err
		}},
		{"Host.Envs(Active, WithCommands) = envs", func() (int, error) {
			r, err := h.Envs(ctx, hostfork.EnvFilter{Active: true, WithCommands: true})
			return len(r), err
		}},
		{"Host.Envs(all) = envs --all -q", func() (int, error) {
			r, err := h.Envs(ctx, hostfork.EnvFilter{})
			return len(r), err
		}},
		{"Host.Envs(all, WithCommands) = envs --all", func() (int, error) {
			r, err := h.Envs(ctx, hostfork.EnvFilter{WithCommands: true})
			return len(r), err
		}},
	}
	times := make([][]float64, len(calls))
	counts := make([]int, len(calls))
	for i := -1; i < *n; i++ { // one warm-up round
		for k := range calls {
			c := calls[(k+max(i, 0))%len(calls)]
			idx := (k + max(i, 0)) % len(calls)
			t := time.Now()
			cnt, err := c.fn()
			d := ms(time.Since(t))
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if i >= 0 {
				times[idx] = append(times[idx], d)
				counts[idx] = cnt
			}
		}
	}
	fmt.Printf("store %s; Open %.2f ms; load %s\n\n", *root, open, loadavg())
	fmt.Println("| call | records | median ms | p90 | max |")
	fmt.Println("|---|---|---|---|---|")
	for k, c := range calls {
		fmt.Printf("| %s | %d | %.2f | %.2f | %.2f |\n", c.name, counts[k], median(times[k]), quantile(times[k], .9), quantile(times[k], 1))
	}
	return nil
}
