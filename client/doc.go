// Package client is the Go client of `hostfork serve`, the local HTTP API
// on a unix socket (docs/api.md). It speaks the types of package api — the
// same records, events and reports the library and the CLI's --json use —
// and maps the server's errors back to api's sentinels, so
// errors.Is(err, api.ErrNotFound) works against a server as it does
// in-process.
//
// It imports only the standard library and package api: a program that
// talks to a server does not link the engine (no cgo, no SQLite). Any
// program may import it. Use the library (package hostfork) instead when
// the program should own its commands itself, without a server.
//
// The package also holds the API's wire types (the request bodies and the
// error body), which the server decodes, so both sides share one
// definition.
package client
