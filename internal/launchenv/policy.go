package launchenv

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/habemus-papadum/hostfork/spec"
)

// DefaultPath is PATH under the clean policy: the usual system directories,
// in the order login(1) and sudo's secure_path use.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ToolchainVars are the variables the toolchain policy takes from the login
// shell. They say where toolchains are installed and are not secrets:
//
//   - PATH, PATHEXT: where programs are found (PATHEXT matters only to
//     .NET tools ported from Windows, but it is harmless).
//   - DOTNET_ROOT, DOTNET_ROOT_X64, DOTNET_ROOT_X86: the .NET install roots
//     the .NET host uses to find the runtime.
//   - GOROOT, GOPATH: the Go installation and workspace.
//   - JAVA_HOME: the JDK that Gradle, Maven and friends use.
//   - CARGO_HOME, RUSTUP_HOME: the Rust toolchain and its cache.
//
// Deliberately absent: variables that can carry credentials or change what
// a build does rather than where it finds tools — GOPROXY, GOPRIVATE,
// GONOSUMDB and GOFLAGS, NPM_CONFIG_* and NODE_AUTH_TOKEN, PIP_INDEX_URL
// and PIP_EXTRA_INDEX_URL (index URLs often embed a password),
// CARGO_REGISTRIES_*, RUSTFLAGS, and any *_TOKEN, *_KEY or *_PASSWORD.
var ToolchainVars = []string{
	"PATH", "PATHEXT",
	"DOTNET_ROOT", "DOTNET_ROOT_X64", "DOTNET_ROOT_X86",
	"GOROOT", "GOPATH",
	"JAVA_HOME",
	"CARGO_HOME", "RUSTUP_HOME",
}

// gitRedirections are the Git variables that point Git at another
// repository, worktree, index, object store or configuration. Besides
// these, every GIT_CONFIG* variable is one.
var gitRedirections = []string{
	"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR",
}

// IsGitRedirection reports whether the variable named k redirects Git.
func IsGitRedirection(k string) bool {
	return strings.HasPrefix(k, "GIT_CONFIG") || slices.Contains(gitRedirections, k)
}

// Account is the user the command runs as, as the password database
// describes it; the clean policy falls back to it when the caller's
// environment lacks HOME, USER or LOGNAME.
type Account struct {
	UID   int    `json:"uid"`
	Name  string `json:"name"`
	Home  string `json:"home"`
	Shell string `json:"shell"`
}

// Input is everything Resolve needs. Resolve reads nothing else.
type Input struct {
	// Policy is inherit, clean, host-shell or toolchain; "" is inherit.
	Policy string
	// Inherited is the caller's environment (os.Environ()).
	Inherited []string
	// Shell is the captured login-shell environment, or nil when it was
	// not captured (then ShellErr says why). Only host-shell and toolchain
	// use it.
	Shell    []string
	ShellErr error
	Account  Account
	// Explicit variables (K=V) are applied last, in order, over whatever
	// the policy produced; they may set Git redirections.
	Explicit []string
}

// Result is the resolved environment.
type Result struct {
	Env []string
	// Note is set when the policy could not be followed exactly: the
	// host-shell capture failed and the inherited environment was used.
	// Callers record it and show it as a warning.
	Note string
}

// NeedsShell reports whether a policy uses the login-shell capture.
func NeedsShell(policy string) bool {
	return policy == spec.EnvHostShell || policy == spec.EnvToolchain
}

// ErrPolicy wraps an unknown policy name.
var ErrPolicy = errors.New("unknown environment policy")

// Resolve applies the policy. In every policy Git redirections that came
// from the caller or from the login shell are removed; only Explicit can
// set them.
func Resolve(in Input) (Result, error) {
	var base *envList
	var note string
	switch in.Policy {
	case "", spec.EnvInherit:
		base = parse(in.Inherited)
	case spec.EnvClean:
		base = clean(in.Inherited, in.Account)
	case spec.EnvHostShell:
		if in.Shell == nil {
			base = parse(in.Inherited)
			note = "host-shell: " + shellFailure(in.ShellErr) + "; the inherited environment was used unchanged"
		} else {
			base = parse(in.Shell)
		}
	case spec.EnvToolchain:
		base = parse(in.Inherited)
		if in.Shell == nil {
			note = "toolchain: " + shellFailure(in.ShellErr) + "; PATH and the toolchain variables were left as inherited"
		} else {
			sh := parse(in.Shell)
			for _, k := range ToolchainVars {
				if v, ok := sh.get(k); ok {
					base.set(k, v)
				}
			}
		}
	default:
		return Result{}, fmt.Errorf("%q: use inherit, clean, host-shell or toolchain: %w", in.Policy, ErrPolicy)
	}
	base.drop(IsGitRedirection)
	for _, kv := range in.Explicit {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !spec.ValidEnvName(k) {
			return Result{}, fmt.Errorf("explicit variable %q: write it as NAME=VALUE: %w", kv, spec.ErrInvalid)
		}
		base.set(k, v)
	}
	return Result{Env: base.environ(), Note: note}, nil
}

func shellFailure(err error) string {
	if err == nil {
		return "the login-shell environment was not captured"
	}
	return "capturing the login-shell environment failed (" + err.Error() + ")"
}

// clean builds the minimal environment.
func clean(inherited []string, acct Account) *envList {
	in := parse(inherited)
	out := &envList{}
	out.set("PATH", DefaultPath)
	fallback := map[string]string{"HOME": acct.Home, "USER": acct.Name, "LOGNAME": acct.Name}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		if v, ok := in.get(k); ok {
			out.set(k, v)
		} else if fallback[k] != "" {
			out.set(k, fallback[k])
		}
	}
	for _, k := range in.keys {
		if k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") || k == "TERM" {
			v, _ := in.get(k)
			out.set(k, v)
		}
	}
	return out
}

// ExplicitFromMap turns a spec's env map into K=V entries in key order, so
// the result does not depend on map iteration.
func ExplicitFromMap(m map[string]string) []string {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

// envList is an environment with unique keys that keeps the order in which
// keys first appeared (a later duplicate wins, as in os/exec).
type envList struct {
	keys []string
	vals map[string]string
}

func parse(env []string) *envList {
	l := &envList{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		l.set(k, v)
	}
	return l
}

func (l *envList) get(k string) (string, bool) {
	v, ok := l.vals[k]
	return v, ok
}

func (l *envList) set(k, v string) {
	if l.vals == nil {
		l.vals = map[string]string{}
	}
	if _, ok := l.vals[k]; !ok {
		l.keys = append(l.keys, k)
	}
	l.vals[k] = v
}

func (l *envList) drop(match func(string) bool) {
	kept := l.keys[:0]
	for _, k := range l.keys {
		if match(k) {
			delete(l.vals, k)
			continue
		}
		kept = append(kept, k)
	}
	l.keys = kept
}

func (l *envList) environ() []string {
	out := make([]string, 0, len(l.keys))
	for _, k := range l.keys {
		out = append(out, k+"="+l.vals[k])
	}
	return out
}

// Merge applies explicit K=V variables over env (a later value wins, at
// the key's first position) without removing anything: for an environment
// the caller gave explicitly.
func Merge(env, explicit []string) ([]string, error) {
	l := parse(env)
	for _, kv := range explicit {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !spec.ValidEnvName(k) {
			return nil, fmt.Errorf("explicit variable %q: write it as NAME=VALUE: %w", kv, spec.ErrInvalid)
		}
		l.set(k, v)
	}
	return l.environ(), nil
}
