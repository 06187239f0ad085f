// Package engine is hostfork's orchestration: it creates environments,
// launches, watches and stops command trees, settles records from
// evidence, reaps, applies retention, exports trees and reports usage and
// capacity. It combines the registry (internal/registry), the pure
// decisions (internal/decide), the tree-stop mechanism (internal/tree), the
// C helpers (internal/supervise), storage, views, limits and systemd.
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
