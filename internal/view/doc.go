// Package view owns an environment's filesystem view: the mount operations
// (as data) that turn an inherited copy of the host's mounts into the
// environment's view, and the keeper, a re-executed hostfork mode that
// lives in its own private mount namespace, applies those operations in
// one place, and holds the namespace while commands come and go.
//
// The hostfork library imports it to plan and start keepers; the guardian
// joins a keeper's namespace by PID. Only Linux code imports it.
package view
