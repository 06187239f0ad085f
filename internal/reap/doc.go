// Package reap settles what crashes interrupted: it reconciles the intent
// ledger with what exists, finishes due and interrupted stops and
// creations, and settles intents that never produced a resource. What it
// needs of the engine (settling and stopping commands and environments) it
// gets through the small Engine interface.
//
// Only the engine imports it (Engine.Reap).
package reap
