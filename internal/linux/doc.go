// Package linux holds the raw Linux process primitives hostfork relies on:
// boot identity, process identity (boot id, PID, start time) read from
// /proc, pidfds, the host facts admission needs (AllowedCPUs,
// MemAvailable), and EINTR-safe wrappers that return *os.SyscallError or
// *os.PathError. It owns no policy. Any hostfork package may import it; it
// imports nothing from hostfork.
package linux
