package launchenv

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// InheritedEnv is os.Environ() without Git redirections
// (IsGitRedirection).
func InheritedEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !IsGitRedirection(k) {
			out = append(out, kv)
		}
	}
	return out
}

func pathOf(env []string) string {
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	return path
}

// LookPath resolves a program on the host the way a launch without a view
// does.
func LookPath(argv0 string, env []string) (string, error) {
	if env == nil {
		env = InheritedEnv()
	}
	if strings.Contains(argv0, "/") {
		st, err := os.Stat(argv0)
		if err != nil {
			return "", fmt.Errorf("%s: %w (check the path)", argv0, api.ErrExecutableNotFound)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s: %w (it is a directory or lacks execute permission)", argv0, api.ErrNotExecutable)
		}
		return argv0, nil
	}
	for _, dir := range filepath.SplitList(pathOf(env)) {
		dir = cmp.Or(dir, ".")
		p := filepath.Join(dir, argv0)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH: %w (install it or give its full path)", argv0, api.ErrExecutableNotFound)
}

// ViewRoot is a descriptor of a view's root: the keeper's /proc/PID/root,
// through which paths are resolved as the workload will see them
// (openat2 RESOLVE_IN_ROOT: absolute symlinks and ".." stay inside).
// The view's root is a safefs.Root (RESOLVE_IN_ROOT), opened from the
// keeper's pidfd-checked /proc/PID/root by the caller.
type ViewRoot struct{ *safefs.Root }

// LookPath resolves argv0 inside the view; the returned path is the one
// the guardian execs there.
func (v *ViewRoot) LookPath(argv0 string, env []string) (string, error) {
	check := func(p string) (bool, error) {
		st, err := v.Stat(p)
		if err != nil {
			return false, nil
		}
		if st.Type == "dir" || st.Mode&0o111 == 0 {
			return true, fmt.Errorf("%s: %w inside the environment's view (it is a directory or lacks execute permission)", p, api.ErrNotExecutable)
		}
		return true, nil
	}
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			wd, _ := os.Getwd()
			p = filepath.Join(wd, p)
		}
		found, err := check(p)
		if !found {
			return "", fmt.Errorf("%s: %w inside the environment's view (check the path)", argv0, api.ErrExecutableNotFound)
		}
		return p, err
	}
	for _, dir := range filepath.SplitList(pathOf(env)) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, argv0)
		if found, err := check(p); found && err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH inside the environment's view: %w (install it or give its full path)", argv0, api.ErrExecutableNotFound)
}

// IsDir reports whether p is a directory inside the view.
func (v *ViewRoot) IsDir(p string) bool {
	st, err := v.Stat(p)
	return err == nil && st.Type == "dir"
}
