// Package oneproc gives the hostfork CLI one P (GOMAXPROCS=1) from its
// first package initialiser on, unless GOMAXPROCS is set (and not empty)
// in the environment (docs/decisions.md, entries 54 and 65).
//
// One CLI call is a short, mostly waiting goroutine tree: a second P only
// adds threads and a spinning scheduler, which a hundred concurrent calls
// pay on every core (entry 54). The runtime sizes GOMAXPROCS before any Go
// code runs, so the earliest a program can change it is a package
// initialiser. Go initialises packages in the order of their import paths
// among those whose imports are initialised (Go 1.21), and this package
// imports only runtime and syscall, so its initialiser runs before every
// initialiser of hostfork's own packages and of most of its dependencies.
// With the change in main instead, those initialisers ran with two Ps
// and the change itself stopped the world to take the second P back:
// 'hostfork version' took 14.4 ms against 10.9 ms with this package
// (interleaved, 200 rounds).
//
// Only cmd/hostfork imports it: the companion (serve, mcp) and programs
// that import the library keep the runtime's default.
package oneproc

import (
	"runtime"
	"syscall"
)

func init() {
	if v, _ := syscall.Getenv("GOMAXPROCS"); v == "" {
		runtime.GOMAXPROCS(1)
	}
}
