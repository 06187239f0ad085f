// Package support plans, installs, inspects and removes hostfork's optional
// host integration (seed 001, "Doctor, installation and command-line
// use"): a versioned reaper service and timer and a finite finalizer
// service template for one store root, in the system manager
// (/etc/systemd/system) or the user's (~/.config/systemd/user).
//
// The plan is pure data (Build): exactly the files, their contents and the
// systemctl commands, so that it can be shown before anything is done and
// install is idempotent. Without systemd the plan says so and names the
// alternatives (a cron line, 'hostfork reap --watch' under the user's own
// supervisor); install then refuses. Support never formats storage,
// changes sysctls, enables lingering or removes retained data.
//
// The CLI (internal/cli) and doctor import it; it imports nothing from
// hostfork.
package support
