package linux

import (
	"time"

	"golang.org/x/sys/unix"
)

// MonotonicNow returns CLOCK_MONOTONIC as a duration since an arbitrary
// point fixed for this boot. It is shared by all processes of a boot, so a
// deadline expressed on it can be handed to a re-executed helper; it does
// not advance during suspend, matching systemd's RuntimeMaxSec clock.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
