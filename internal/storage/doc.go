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
