// Package safefs owns hostfork's descriptor-based filesystem operations:
// opening directories without following symbolic links (openat2
// RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH, O_NOFOLLOW), creating directories
// and files exclusively relative to an open parent, checking that a
// directory and its ancestors can only be written by their owner or root
// (CheckTrusted, EnsurePrivateDir), and removing a tree by descriptors
// after checking its recorded identity (RemoveTree).
//
// It exists because other local users are hostfork's adversary
// (DESIGN.md, "Trust model"): nothing they can write, a symbolic link in
// /tmp, a directory beside a baseline, a name swapped during a copy, may
// make hostfork write, chmod, chown or delete outside what it created. The
// rules that follow from that:
//
//   - a path is resolved once, into a Dir; everything below is reached
//     relative to that descriptor, one checked component at a time, and a
//     path string is never built and re-resolved later;
//   - a symbolic link met on the way is an error (ErrSymlink), never
//     followed; metadata is set on descriptors;
//   - what is created is created exclusively (ErrExists otherwise) and
//     checked to be the caller's;
//   - a delete names the object it means by identity (FileID) and stays on
//     the filesystem and mount it started on.
//
// Root (root.go) is the other half: a view of the filesystem whose root
// bounds every name (RESOLVE_IN_ROOT), for an environment's files.
//
// Only library packages of this module import it (storage, the engine,
// the store, the root package for an environment's files); safefstest
// holds its adversarial test helpers. It is Linux
// only and needs openat2 (Linux 5.6) and statx mount ids (Linux 5.8).
package safefs
