package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// HelperName is the standalone helper program: the guardian and the
// keeper alone, in a small static C program that scripts/build.sh builds
// and installs beside hostfork (decision 80). Its start costs a fraction
// of the whole hostfork binary's (no Go, and a C library without glibc's
// start-up probes), once per command and once per environment with a
// view. Without it, both are started from the running binary itself,
// which carries them too (hf_ctor.c).
const HelperName = "hostfork-helper"

// HelperEnv names the variable that chooses a helper program explicitly:
// an absolute path (for a test, or an unusual install). It must pass the
// same checks as the one beside the executable; a build by
// scripts/build.sh also requires the helper to come from the same build.
const HelperEnv = "HOSTFORK_HELPER"

// helperID is the identity of the helper built alongside this binary:
// the SHA-256 of the helper program, which scripts/build.sh passes with
// -ldflags -X and appends to the helper as its trailer. Empty in any
// other build (go build, go run, go test), which then uses a helper only
// when HelperEnv names one.
var helperID string

// helperTrailerTag starts the line scripts/build.sh appends to the
// helper after linking: the tag, 64 hex digits and a newline. The ELF
// loader ignores bytes past the segments.
const helperTrailerTag = "\nhostfork-helper-id "

const helperTrailerLen = len(helperTrailerTag) + 64 + 1

// Helper is the program guardians and keepers are started from.
type Helper struct {
	// Path is the program's path: HelperName's, or /proc/self/exe.
	Path string
	// File is the helper, open: it is started through this descriptor,
	// so the file checked is the file run even if the path is replaced
	// (an upgrade under a long-running server). Nil for /proc/self/exe.
	File *os.File
	// Standalone is true for a helper program, false for the running
	// binary itself.
	Standalone bool
	// Why says why the running binary is used ("" for a helper program).
	Why string
}

// Close closes the helper's descriptor.
func (h *Helper) Close() error {
	if h == nil || h.File == nil {
		return nil
	}
	return h.File.Close()
}

// SelfHelper is the running binary, which carries both helpers.
func SelfHelper(why string) *Helper { return &Helper{Path: "/proc/self/exe", Why: why} }

// FindHelper returns the program to start guardians and keepers from:
// the one HelperEnv names (an error if it fails the checks), else the
// HelperName beside the running executable when it is the helper of this
// build, else the running binary.
func FindHelper() (*Helper, error) {
	if p := os.Getenv(HelperEnv); p != "" {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%s=%q: give the helper's absolute path, or unset it to use %s beside hostfork", HelperEnv, p, HelperName)
		}
		f, err := openHelper(p, helperID != "")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", HelperEnv, err)
		}
		return &Helper{Path: p, File: f, Standalone: true}, nil
	}
	if helperID == "" {
		return SelfHelper("this build has no helper of its own"), nil
	}
	// os.Executable reads /proc/self/exe, a path the kernel resolved: no
	// symbolic link is left in it.
	exe, err := os.Executable()
	if err != nil {
		return SelfHelper(fmt.Sprintf("the executable's path is unknown: %v", err)), nil
	}
	p := filepath.Join(filepath.Dir(exe), HelperName)
	f, err := openHelper(p, true)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return SelfHelper(p + " does not exist"), nil
		}
		return SelfHelper(err.Error()), nil
	}
	return &Helper{Path: p, File: f, Standalone: true}, nil
}

// openHelper opens p and checks it on the descriptor (linux.OpenProgram)
// and, with sameBuild, that its trailer names this build's helper.
func openHelper(p string, sameBuild bool) (*os.File, error) {
	f, st, err := linux.OpenProgram(p)
	var r *linux.RefusedProgramError
	switch {
	case errors.As(err, &r):
		return nil, fmt.Errorf("not using %s as the helper: %s (%s)", p, r.Why, r.Fix)
	case err != nil:
		return nil, err
	}
	why := ""
	if sameBuild {
		id, err := readHelperID(f, st.Size)
		switch {
		case err != nil:
			why = err.Error()
		case id != helperID:
			why = fmt.Sprintf("it is the helper of another build (%.12s, this hostfork's is %.12s): install both from one 'scripts/build.sh DIR'", id, helperID)
		}
	}
	if why != "" {
		f.Close()
		return nil, fmt.Errorf("not using %s as the helper: %s", p, why)
	}
	return f, nil
}

// readHelperID reads the helper id from the trailer of f (size bytes).
func readHelperID(f *os.File, size int64) (string, error) {
	if size < int64(helperTrailerLen) {
		return "", errors.New("it has no helper id (not built by scripts/build.sh)")
	}
	b := make([]byte, helperTrailerLen)
	if _, err := f.ReadAt(b, size-int64(helperTrailerLen)); err != nil {
		return "", fmt.Errorf("reading its helper id: %v", err)
	}
	if !bytes.HasPrefix(b, []byte(helperTrailerTag)) || b[len(b)-1] != '\n' {
		return "", errors.New("it has no helper id (not built by scripts/build.sh)")
	}
	return string(b[len(helperTrailerTag) : len(b)-1]), nil
}

// HelperID is this build's helper id ("" when it has none).
func HelperID() string { return helperID }
