package storage

// MountFlags splits mount(8)-style options into mount(2) flags and the
// filesystem data string, as Mount.Apply does, for a caller that applies a
// Mount in another process (the keeper).
func MountFlags(opts []string) (flags uintptr, data string) { return parseOptions(opts) }
