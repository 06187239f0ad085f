package main

import (
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// The launcher sends its boot id to the guardian for the receipt
// (decision 170): a simulated one (linux.BootIDEnv, test binaries only)
// longer than a kernel's still starts the command, and one the release
// can't carry is refused by the launcher with an error that names it, not
// left to the guardian to refuse (which read as "exit status not
// observed").
func TestRunCarriesALongSimulatedBootID(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		n    int
		code int
		msg  string
	}{{100, 0, ""}, {300, 125, "boot id longer than 255 bytes"}} {
		cmd := c.command("run", "--", "true")
		cmd.Env = append(cmd.Env, linux.BootIDEnv+"="+strings.Repeat("b", tc.n))
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		if code != tc.code || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("a %d-byte boot id: exit %d (%v), stderr %q; want exit %d and %q", tc.n, code, err, errb.String(), tc.code, tc.msg)
		}
	}
}
