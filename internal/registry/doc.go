// Package registry is hostfork's durable store: one SQLite database
// (registry.sqlite, WAL mode) holding environments, commands, their labels,
// the allocation-intent ledger, the numbered event log, baselines and
// store settings. It is the single authority of the store (DESIGN.md, "The
// store").
//
// Every row carries a revision and every change is a compare-and-set on
// it, so a late writer can't roll back a newer decision. Writes are
// declarative: a caller gathers its facts first (reads, OS observations),
// describes the changes in a Batch, and Commit applies them in one short
// IMMEDIATE transaction. A Batch holds no callbacks, so no OS call and no
// second connection can run inside a write transaction. The events of a
// change are derived from it inside the same transaction, and intents are
// settled by one rule (SettleIntents), so neither can be forgotten or done
// two ways.
//
// Only the engine (internal/engine) and tests import it. It knows nothing
// about processes, cgroups or files beyond its own database.
package registry
