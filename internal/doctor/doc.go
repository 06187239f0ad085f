// Package doctor answers "can hostfork do what I ask on this host, and if
// not, what exactly do I change?" (DESIGN.md, "Interfaces": doctor; the
// architecture's "Doctor, installation and command-line use").
//
// It has three layers, kept apart so the decisions can be tested without a
// particular host:
//
//   - read.go gathers Facts from the system without changing anything
//     (mountinfo, cgroup files, sysctls, /proc/filesystems, the store's
//     registry opened read-only, unit files);
//   - checks.go is pure: Evaluate turns Facts and the Needs of a plan into
//     Checks, each with a status (ok, missing, degraded), an evidence level
//     and, when something is missing, the exact remedy; Verdict decides
//     whether the requested plan (or the default run) can run;
//   - probe.go, only when asked (--probe), proves capabilities by creating
//     disposable owned resources — a cgroup with a process cloned into it,
//     a mount namespace, an overlay mount inside it, a pidfd, a Btrfs
//     snapshot, a login-shell capture — and removes every one of them,
//     also on failure, then checks that nothing was left behind.
//
// Only internal/cli imports it. It imports the mechanism packages (cgroup,
// registry, storage, launchenv) but never the hostfork library package:
// the CLI passes the library's plan in as a PlanSummary.
package doctor
