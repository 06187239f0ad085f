package cli

import (
	"os"
	"testing"

	"github.com/habemus-papadum/hostfork"
)

// modeOf reads the nine permission places of every kind of entry (a plain
// file's mode string starts with "-", which once shifted every bit).
func TestModeOf(t *testing.T) {
	for mode, want := range map[string]os.FileMode{
		"-rw-r--r--":  0o644,
		"-rwx------":  0o700,
		"drwxr-xr-x":  0o755,
		"urwsr-xr-x":  0o755,
		"Lrwxrwxrwx":  0o777,
		"dtrwxrwxrwx": 0o777,
		"----------":  0o644, // nothing readable: the default
	} {
		if got := modeOf(hostfork.DirEntry{Mode: mode}); got != want {
			t.Errorf("modeOf(%q) = %o, want %o", mode, got, want)
		}
	}
}
