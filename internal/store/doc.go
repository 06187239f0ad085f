// Package store owns a hostfork store's directory: where it is by default,
// making it and checking it against the trust rule (only its owner and root
// can write it and every directory above it; DESIGN.md, "Trust model"),
// tightening what is below it, checking its registry file, and its
// configuration file (config.yaml: retention and admission defaults).
//
// Only the engine imports it.
package store
