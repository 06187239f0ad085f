// Command hfbench is the driver behind the bench/ scripts: it runs
// hostfork and its peer interleaved, sample by sample, and reports medians,
// tails, CPU time, memory and ratios together with the load average.
// It is a measuring tool only; nothing in hostfork imports it.
//
//	hfbench ab [flags] NAME=COMMAND...   interleaved side-by-side runs
//	hfbench list -root STORE [-n N]      Host.Commands / Host.Envs on a store
//	hfbench seed -root STORE [-n N]      N retained runs through Host.Run
//
// Why not hyperfine alone: hyperfine runs every run of one command before
// the next, so on a shared, noisy machine a burst of load lands on one
// command only. ab runs round r as the commands in turn (rotated by r, so
// no command always goes first): A B, B A, A B, ... Each sample's CPU time
// is the user+system time of the command and of every descendant it waited
// for (wait4's rusage), which for 'hostfork run' includes the guardian and
// the workload, and for bwrap its namespace init and the workload.
//
// A COMMAND is one or more steps separated by " ;; ", each split into words
// like a shell would (single and double quotes, no expansion). "$1" in a
// later step is replaced by the first step's standard output (trimmed), so
// "hostfork create ... ;; hostfork exec $1 -- /bin/true ;; hostfork stop $1"
// is one sample of three processes. The sample's wall time spans all steps;
// its CPU time is their sum.
//
// A COMMAND "@run SOCKET ARGV..." runs in hfbench itself instead, through
// the public Go client of a warm 'hostfork serve' on SOCKET: one run (a
// fresh environment with ARGV as its first command) and a wait for its
// tree; with -par N, N goroutines share one client. Its samples have wall
// time only (client.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "ab":
		err = abMain(os.Args[2:])
	case "seed":
		err = seedMain(os.Args[2:])
	case "list":
		err = listMain(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hfbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: hfbench ab [flags] NAME=COMMAND... | hfbench list -root STORE [-n N] | hfbench seed -root STORE [-n N]")
	os.Exit(2)
}
