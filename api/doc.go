// Package api defines the types of hostfork's API: the records of
// environments and commands, their states, events, filters, reports and the
// sentinel errors. The library (package hostfork, which re-exports them
// under the same names), the CLI's --json output, the HTTP server of
// `hostfork serve`, its Go client and the Temporal worker all speak these
// types, so a record has one shape wherever it is read.
//
// It imports only the standard library and holds no behaviour beyond
// encoding, so any program may import it — including one that talks to a
// hostfork server without linking the engine (no cgo, no SQLite).
//
// JSON conventions (docs/json.md): field names are snake_case; times are
// RFC 3339 in UTC; durations are Go duration strings ("10m0s", "2s"; "0s"
// means none); a result that was not observed is null, never a guess.
package api
