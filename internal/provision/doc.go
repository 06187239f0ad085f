// Package provision makes an environment's parts on the host: its private
// trees (where each is allocated, preparing them through their storage
// backends, removing them when a creation is undone), the view's
// operations over them for the keeper, and its systemd scope around the
// keeper with the cgroup layout inside it. The engine records the intents
// and identities around each step; nothing here writes the registry.
//
// Only the engine imports it.
package provision
