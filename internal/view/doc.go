// Package view describes an environment's view of the host — the
// operations that turn the host's mount table into the environment's:
// binds, overlays, private scratch, read-only paths and restored shares —
// and compiles them into the primitive steps the keeper (a C helper in
// internal/supervise) applies in its own mount namespace. It also reads the
// host's mount table for the planner. It changes no mount itself. Only the
// engine imports it.
package view
