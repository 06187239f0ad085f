// Package decide holds hostfork's pure decisions: what a command's record
// becomes given the evidence gathered about it, what an environment's
// reconciliation must do, which stop reason wins, and what retention
// deletes. Each is a function of facts the engine gathered first; none
// touches the OS or the registry, so each has a table test (STYLE.md,
// "Decide, then act"). The engine (internal/engine) applies the results.
package decide
