package cli

import "golang.org/x/sys/unix"

func tcsetpgrp(fd, pgrp int) error {
	return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgrp)
}
