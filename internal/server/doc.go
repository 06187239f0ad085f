// Package server is the HTTP API of `hostfork serve` (docs/api.md): a
// versioned REST API on a unix socket over the public library (package
// hostfork) — never the engine or the registry directly — plus Prometheus
// metrics read from the kernel's counters at scrape time and the OpenAPI
// document of its routes.
//
// Who may talk to it (DESIGN.md, "Trust model"): the peer's credentials
// (SO_PEERCRED) must be root's or the store owner's; requests that carry
// Origin or Referer, or a Host other than the socket's, are refused, so a
// browser page can never reach it. Environments and commands it creates are
// bounded like a detached run and outlive it: the server is never a second
// lifetime authority.
//
// Besides the library it uses package client (the shared wire types) and,
// through the callbacks of Config, the CLI's exit-code table and the
// read-only doctor report. Only internal/cli imports it.
package server
