// Package supervise implements the guardian, the small per-command
// supervisor that hostfork re-executes from its own binary, and the
// launcher's side of its protocol: the registration gate, events, the
// receipt, owner-exit and deadline handling, tree stop and output tee.
//
// The guardian is written in C (guardian.c) and runs before the Go runtime
// starts: an ELF constructor, compiled into every binary that links this
// package, receives (argc, argv, envp) from glibc and, when argv[1] is
// GuardianMode, runs the whole guardian and calls _exit(); otherwise it
// returns at once (the technique of runc's nsexec). A Go process needs
// several milliseconds of page faults to start on small VMs and several
// MiB of anonymous memory to idle; the C guardian starts in about the time
// of a static C program and supervises in well under 1 MiB. It is
// single-threaded: one poll loop over a signalfd (SIGCHLD, SIGTERM), a
// timerfd (deadline, stop grace), the control pipe and the tee pipes; it
// uses no heap but the C library's opendir in a tree listing (hf_tree.c).
// Its wire protocol (a length-framed release, then one-line control
// messages; key=value events and receipt out, read by one parser in
// fields.go) is documented in protocol.go: the C side never reads or
// writes JSON.
//
// The guardian does not touch the registry. It reports through a pipe to
// the launcher (when one is alive) and through its receipt file, which any
// later reader (ps, status, stop, reap) can verify and ingest. This keeps
// deadlines and owner-exit stops independent of the registry and of the
// caller (DESIGN.md, "Linux execution: who owns what").
//
// The hostfork library imports this package; the CLI does not.
package supervise
