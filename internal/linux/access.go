package linux

import "golang.org/x/sys/unix"

// Writable reports whether this process may write path (access(2) W_OK).
func Writable(path string) bool { return unix.Access(path, unix.W_OK) == nil }

// FillRandom fills b from the kernel's generator with getrandom(2)
// (blocking until the pool is ready); it reports false when the read
// failed or was short.
func FillRandom(b []byte) bool {
	n, err := unix.Getrandom(b, 0)
	return err == nil && n == len(b)
}
