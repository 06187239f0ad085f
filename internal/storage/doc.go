// Package storage owns hostfork's private trees: a writable Btrfs snapshot of
// a prepared baseline subvolume, an OverlayFS upper/work pair over a stable
// lower, or a (reflink) copy of a directory. Each kind is a Backend with the
// same small contract (see Backend): Prepare allocates exclusively inside a
// destination directory the caller names and that must not exist yet,
// Mounts describes the tree as mounts-as-data for the view to apply, Verify
// re-checks a recorded Tree's identity (device+inode, subvolume id and UUID,
// the overlay lower), and Remove deletes exactly what Prepare made, refusing
// anything whose identity no longer matches and never touching a borrowed
// baseline or lower.
//
// Other local users are not trusted (DESIGN.md, "Trust model"), so every
// filesystem operation goes through descriptors (package safefs): a tree
// is allocated in an allocation area that PoolDir opens or creates private
// (a real directory, owned by this user or root, writable by nobody else;
// a symbolic link, another user's or a writable directory planted under
// that name is refused), Prepare creates the destination exclusively
// relative to the area's descriptor and everything inside relative to the
// destination's, and Verify, Remove and RemoveUnrecorded open every
// recorded part without following symbolic links, check its identity on
// the descriptor, and delete with safefs.RemoveTree, which never follows a
// link or crosses a mount. CopyDir, the exporter, builds its copy the same
// way in a private partial directory beside the destination and renames it
// into place at the end, so another user who can write the destination's
// parent can't redirect a write or a chmod.
//
// The engine gets its allocation areas with
//
//	pool, err := storage.PoolDir(parent, name) // <store>/trees, <dir of baseline>/.hostfork-trees
//	defer pool.Close()
//	tree, err := backend.Prepare(ctx, storage.Request{Dest: filepath.Join(pool.Path(), leaf), Source: src, Pool: pool})
//
// and may also name a Dest without a Pool, whose parent Prepare then opens
// and checks the same way.
//
// The package performs no registry writes and holds no policy: the caller
// records the intent before Prepare and the returned Tree after it (DESIGN.md,
// "Storage and the view"). It never formats filesystems or creates baselines
// at launch; CreateSubvolume exists for explicit host preparation and tests.
//
// Mount.Apply is the one place a tree's mount is made; it is meant to run in
// a private mount namespace (the keeper's), never in the caller's.
//
// Only Linux code imports this package: the library, the keeper, the reaper
// and doctor. The conformance suite every backend runs is in storagetest.
package storage
