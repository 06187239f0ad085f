// Package records is the store's records as the engine and its passes read
// and keep them: registry rows with every directory pinned to the store's
// own layout (Records), the facts that settle intents, the readable copies
// (manifest.json, record.json, redacted), the kept stop decisions, and the
// per-environment and per-command locks.
//
// The engine and the store-wide passes (internal/reap, internal/retention,
// internal/export, internal/usage) import it; the fronts never do.
package records
