// Package engine is hostfork's orchestration: it creates environments,
// launches, watches and stops command trees, and settles records from
// evidence. It combines the registry (through internal/records), the pure
// decisions (internal/decide), the evidence (internal/evidence), the
// tree-stop mechanism (internal/tree), the C helpers (internal/supervise),
// storage, views, limits and systemd. The store-wide passes and the other
// jobs it delegates — reap, retention, export, usage, fork, deadline
// moves, output capture, planning, admission, provisioning — live in their
// own packages below it (services.go opens
// them and gives them the few operations of its own they need).
//
// Its rules (DESIGN.md): every OS mutation is preceded by an intent in the
// ledger and followed by the resulting identity; the registry is written
// in short batches built from facts gathered first, never across an OS
// operation; a kill never waits for a record; the first stop reason wins.
// A launch costs three commits: its reservation, its guardian's
// registration (with the environment's activation for a run), and its
// result (with the environment's stop for a run); an exec folds the first
// two (decision 56). Every commit is durable when it returns.
//
// The public API (package hostfork) is its only importer, besides tests.
package engine
