package linux

import "golang.org/x/sys/unix"

// Writable reports whether this process may write path (access(2) W_OK).
func Writable(path string) bool { return unix.Access(path, unix.W_OK) == nil }
