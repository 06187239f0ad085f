// Package supervise implements the guardian, the small per-command
// supervisor that hostfork re-executes from its own binary, and the
// launcher's side of its protocol: the registration gate, events, the
// receipt, owner-exit and deadline handling, tree stop and output tee.
//
// The guardian does not touch the registry. It reports through a pipe to
// the launcher (when one is alive) and through its receipt file, which any
// later reader (ps, status, stop, reap) can verify and ingest. This keeps
// deadlines and owner-exit stops independent of the registry and of the
// caller (DESIGN.md, "Linux execution: who owns what").
//
// The hostfork library imports this package; the CLI does not.
package supervise
