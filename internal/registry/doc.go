// Package registry is hostfork's durable store: one SQLite database
// (registry.sqlite, WAL mode) holding environments, commands and the
// allocation-intent ledger. Every row carries a revision and every change is
// a compare-and-set on it, so a late writer can't roll back a newer decision.
// Transactions are short and never held across an OS operation: callers read,
// act on the OS, then write with Update's revision check.
//
// Only the hostfork library and the reaper import it; the CLI goes through
// the library. It knows nothing about processes or cgroups.
package registry
