// Package admission admits agent workloads: it samples the host and the
// live agent workloads, asks the pure internal/admit, and waits, refuses
// or passes a new command under the store's admission lock; it also keeps
// the paused flag. The live commands come from the engine's Reader.
//
// Only the engine imports it (Engine.Capacity, Start).
package admission
