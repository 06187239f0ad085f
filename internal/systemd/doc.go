// Package systemd talks to a systemd manager over D-Bus for the
// systemd-scope ownership tier (DESIGN.md, "Linux execution: who owns what"):
// it creates transient scopes with Delegate=yes, hands their processes over
// as PIDFDs where the manager accepts them, and lets the manager enforce the
// runtime deadline exactly as the deadline contract says (max_runtime from
// activation to force-stop, grace included). It also stops and signals
// units and reads the evidence a manager keeps about them.
//
// Every call has a timeout, a broken connection is replaced on the next
// call, and there is no package-global connection: callers hold a *Conn
// per manager (the system bus, the user bus, or an explicit bus socket such
// as a container's /proc/PID/root/run/dbus/system_bus_socket).
//
// It wraps github.com/coreos/go-systemd/v22/dbus and
// github.com/godbus/dbus/v5 and owns no policy about what a scope is for.
// Only Linux code of hostfork imports it; it imports nothing from hostfork.
// Don't use it for units hostfork does not own, or as a general systemd
// client.
package systemd
