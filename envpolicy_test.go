package hostfork_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/spec"
)

// runEnv runs `env` as a command of e and returns the workload's variables
// and its record.
func runEnv(t *testing.T, e *hostfork.Env, set func(*hostfork.Command)) (map[string]string, hostfork.CommandRecord) {
	t.Helper()
	ctx := ctxT(t)
	cmd := e.Command("env")
	if set != nil {
		set(cmd)
	}
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := hostfork.ExitStatus(rec); !ok || st != 0 {
		t.Fatalf("env: %+v", rec)
	}
	b, err := os.ReadFile(rec.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	return vars, rec
}

// loginShell points the host-shell capture at a fake login shell whose
// "login scripts" are body.
func loginShell(t *testing.T, body string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "login-shell")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(launchenv.LoginShellEnv, p)
}

func TestGitRedirectionsDoNotReachTheWorkload(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	t.Setenv("GIT_DIR", "/caller/repo/.git")
	t.Setenv("GIT_WORK_TREE", "/caller/repo")
	t.Setenv("GIT_CONFIG_GLOBAL", "/caller/gitconfig")
	t.Setenv("HOSTFORK_TEST_CALLER", "1")
	for _, policy := range []string{"", spec.EnvInherit, spec.EnvClean} {
		vars, rec := runEnv(t, env, func(c *hostfork.Command) { c.EnvPolicy = policy })
		for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_GLOBAL"} {
			if v, ok := vars[k]; ok {
				t.Errorf("policy %q: %s=%s reached the workload", policy, k, v)
			}
		}
		if want := policy != spec.EnvClean; (vars["HOSTFORK_TEST_CALLER"] == "1") != want {
			t.Errorf("policy %q: caller variable passed = %v", policy, !want)
		}
		if want := map[string]string{"": "inherit"}[policy]; rec.EnvPolicy != policy && rec.EnvPolicy != want {
			t.Errorf("policy %q recorded as %q", policy, rec.EnvPolicy)
		}
	}
	vars, _ := runEnv(t, env, func(c *hostfork.Command) { c.EnvSet = []string{"GIT_DIR=/explicit/.git"} })
	if vars["GIT_DIR"] != "/explicit/.git" || vars["GIT_WORK_TREE"] != "" {
		t.Errorf("explicit GIT_DIR: %q, GIT_WORK_TREE %q", vars["GIT_DIR"], vars["GIT_WORK_TREE"])
	}
}

func TestToolchainPolicyPassesPathNotSecrets(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	loginShell(t, "export SECRET_TOKEN=hunter2\nexport PATH=/custom/bin:$PATH\nexport DOTNET_ROOT=/opt/dotnet\nshift; exec /bin/sh \"$@\"\n")
	t.Setenv("HOSTFORK_TEST_CALLER", "1")
	t.Setenv("GIT_INDEX_FILE", "/caller/index")

	vars, rec := runEnv(t, env, func(c *hostfork.Command) { c.EnvPolicy = spec.EnvToolchain })
	if !strings.HasPrefix(vars["PATH"], "/custom/bin:") || vars["DOTNET_ROOT"] != "/opt/dotnet" {
		t.Errorf("toolchain: PATH %q, DOTNET_ROOT %q", vars["PATH"], vars["DOTNET_ROOT"])
	}
	if _, ok := vars["SECRET_TOKEN"]; ok {
		t.Error("toolchain: the login shell's SECRET_TOKEN reached the workload")
	}
	if vars["HOSTFORK_TEST_CALLER"] != "1" || vars["GIT_INDEX_FILE"] != "" {
		t.Errorf("toolchain: caller variable %q, GIT_INDEX_FILE %q", vars["HOSTFORK_TEST_CALLER"], vars["GIT_INDEX_FILE"])
	}
	if rec.EnvPolicy != spec.EnvToolchain || rec.EnvPolicyNote != "" {
		t.Errorf("record: policy %q note %q", rec.EnvPolicy, rec.EnvPolicyNote)
	}
	if _, err := os.Stat(filepath.Join(h.Root(), "cache", launchenv.CacheFile)); err != nil {
		t.Errorf("the capture was not cached: %v", err)
	}

	vars, _ = runEnv(t, env, func(c *hostfork.Command) { c.EnvPolicy = spec.EnvHostShell })
	if vars["SECRET_TOKEN"] != "hunter2" || vars["HOSTFORK_TEST_CALLER"] != "" {
		t.Errorf("host-shell: SECRET_TOKEN %q, caller variable %q", vars["SECRET_TOKEN"], vars["HOSTFORK_TEST_CALLER"])
	}
}

func TestHostShellCaptureFailureIsReported(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{Launch: spec.Launch{EnvPolicy: spec.EnvHostShell, Env: map[string]string{"FROM_SPEC": "1"}}})
	loginShell(t, "echo 'profile is broken' >&2\nexit 1\n")
	t.Setenv("HOSTFORK_TEST_CALLER", "1")
	vars, rec := runEnv(t, env, nil)
	if rec.EnvPolicy != spec.EnvHostShell || !strings.Contains(rec.EnvPolicyNote, "profile is broken") {
		t.Errorf("record: policy %q note %q", rec.EnvPolicy, rec.EnvPolicyNote)
	}
	if vars["HOSTFORK_TEST_CALLER"] != "1" || vars["FROM_SPEC"] != "1" {
		t.Errorf("the environment should be the inherited one plus the spec's env: %v", vars)
	}
	_, stored, err := h.Status(ctxT(t), rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored == nil || stored.EnvPolicyNote != rec.EnvPolicyNote {
		t.Errorf("the stored record lacks the note: %+v", stored)
	}
}
