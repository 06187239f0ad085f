package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
)

// TestDependencies fails when the client starts to depend on anything but
// the standard library, package api and github.com/coder/websocket (pure
// Go, no dependencies of its own: attach is a WebSocket) — no cgo, no
// SQLite, no engine —, so a program can talk to a server without linking
// the engine.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-json=ImportPath,Standard,CgoFiles", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	allowed := map[string]bool{"github.com/habemus-papadum/hostfork/api": true, "github.com/habemus-papadum/hostfork/client": true}
	n := 0
	for {
		var p struct {
			ImportPath string
			Standard   bool
			CgoFiles   []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		if !p.Standard && !allowed[p.ImportPath] && p.ImportPath != "github.com/coder/websocket" && !strings.HasPrefix(p.ImportPath, "github.com/coder/websocket/internal/") {
			t.Errorf("package client depends on %s: it may import only the standard library, package api and github.com/coder/websocket", p.ImportPath)
		}
		if !p.Standard && len(p.CgoFiles) > 0 {
			t.Errorf("package client depends on cgo through %s", p.ImportPath)
		}
	}
	if n < 10 {
		t.Fatalf("go list found only %d packages; the listing is broken", n)
	}
}

// TestCauses: every sentinel round-trips through its cause name.
func TestCauses(t *testing.T) {
	for _, s := range []error{api.ErrNotFound, api.ErrAmbiguous, api.ErrExists, api.ErrConflict, api.ErrEnvNotActive, api.ErrInvalid,
		api.ErrUnsupported, api.ErrAdmissionRefused, api.ErrIncompleteCapture, api.ErrStoreFull, api.ErrStore, api.ErrUnverified,
		api.ErrClosed, api.ErrExecutableNotFound, api.ErrNotExecutable, api.ErrForbidden, api.ErrExportFailed, api.ErrTimedOut, api.ErrNoSession, api.ErrCommandFinished} {
		cause := CauseOf(fmt.Errorf("wrapped: %w", s))
		if cause == "" || !errors.Is(&Error{sentinel: sentinelOf(cause)}, s) {
			t.Errorf("%v: cause %q does not map back", s, cause)
		}
	}
	if CauseOf(syscall.ENOSPC) != "store_full" || CauseOf(errors.New("x")) != "" {
		t.Error("ENOSPC or a plain error")
	}
	if _, err := New("relative/api.sock"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("New(relative): %v", err)
	}
	if c, err := New("unix:///run/hostfork/api.sock"); err != nil || c.Socket() != "/run/hostfork/api.sock" {
		t.Errorf("New(unix://): %v %v", c, err)
	}
}
