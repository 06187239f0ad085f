// Package launchenv decides the environment variables a managed command
// starts with (DESIGN.md, "Launch environment policy"): the policies inherit,
// clean, host-shell and toolchain, the removal of inherited Git
// redirections, and explicit variables applied last. Resolve is a pure
// function of its Input; capture.go holds the one part that touches the OS,
// running the user's login shell to capture its environment and caching the
// result in the store.
//
// The library (package hostfork) imports it when it starts a command; the
// CLI imports it only for the policy names and doctor for the capture's
// health. It imports nothing from hostfork but spec.
package launchenv
