package launchenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCapture(t *testing.T) {
	out := []byte("Welcome!\n" + marker + "\nnoise\n" + marker + "\nA=1\x00_=/usr/bin/env\x00PWD=/h\x00B=x=y\x00SHLVL=2\x00")
	env, err := parseCapture(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{"A=1", "B=x=y"}) {
		t.Errorf("%q", env)
	}
	for _, bad := range []string{"no marker", marker + "\n", marker + "\nnoequals\x00"} {
		if _, err := parseCapture([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFresh(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	acct := Account{UID: 1000, Home: "/home/u"}
	s := &Snapshot{Shell: "/bin/bash", UID: 1000, Home: "/home/u", CapturedAt: at}
	tests := []struct {
		name    string
		s       *Snapshot
		shell   string
		acct    Account
		now     time.Time
		startup map[string]time.Time
		ok      bool
	}{
		{"fresh", s, "/bin/bash", acct, at.Add(time.Hour), map[string]time.Time{"/home/u/.profile": at.Add(-time.Hour)}, true},
		{"none", nil, "/bin/bash", acct, at, nil, false},
		{"shell changed", s, "/bin/zsh", acct, at, nil, false},
		{"user changed", s, "/bin/bash", Account{UID: 0, Home: "/root"}, at, nil, false},
		{"too old", s, "/bin/bash", acct, at.Add(25 * time.Hour), nil, false},
		{"startup file changed", s, "/bin/bash", acct, at.Add(time.Hour), map[string]time.Time{"/home/u/.profile": at.Add(time.Minute)}, false},
	}
	for _, tc := range tests {
		ok, reason := Fresh(tc.s, tc.shell, tc.acct, tc.now, 24*time.Hour, tc.startup)
		if ok != tc.ok || (!ok && reason == "") {
			t.Errorf("%s: ok=%v reason=%q", tc.name, ok, reason)
		}
	}
}

// fakeShell writes a login shell: body plays the login scripts, then it runs
// the -c command with /bin/sh (a script that wants that ends with
// "shift; exec /bin/sh \"$@\"", dropping -l so /etc/profile does not reset
// what body exported).
func fakeShell(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-login-shell")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCapture(t *testing.T) {
	ctx := context.Background()
	acct := Account{UID: os.Geteuid(), Name: "u", Home: t.TempDir()}
	sh := fakeShell(t, "echo 'motd from the profile'\nexport SECRET_TOKEN=s3cret\nexport PATH=/custom/bin:$PATH\nshift; exec /bin/sh \"$@\"\n")
	s, err := Capture(ctx, sh, acct, []string{"LANG=C.UTF-8", "CALLER_ONLY=1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	has := func(kv string) bool { return slices.Contains(s.Env, kv) }
	if !has("SECRET_TOKEN=s3cret") || !has("PATH=/custom/bin:"+DefaultPath) || !has("LANG=C.UTF-8") || !has("HOME="+acct.Home) {
		t.Errorf("capture: %q", s.Env)
	}
	for _, kv := range s.Env {
		if strings.HasPrefix(kv, "CALLER_ONLY=") || strings.HasPrefix(kv, "PWD=") {
			t.Errorf("capture holds %s", kv)
		}
	}

	if _, err := Capture(ctx, fakeShell(t, "echo broken profile >&2\nexit 1\n"), acct, nil, 5*time.Second); !errors.Is(err, ErrCapture) || !strings.Contains(err.Error(), "broken profile") {
		t.Errorf("failing shell: %v", err)
	}
	start := time.Now()
	if _, err := Capture(ctx, fakeShell(t, "sleep 30\n"), acct, nil, 300*time.Millisecond); !errors.Is(err, ErrCapture) || !strings.Contains(err.Error(), "did not finish") {
		t.Errorf("hanging shell: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if _, err := Capture(ctx, "/usr/sbin/nologin", acct, nil, time.Second); !errors.Is(err, ErrCapture) {
		t.Errorf("nologin: %v", err)
	}
}

func TestHostShellCache(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cache")
	counter := filepath.Join(t.TempDir(), "count")
	sh := fakeShell(t, "echo x >> "+counter+"\nexport FROM_SHELL=1\nshift; exec /bin/sh \"$@\"\n")
	t.Setenv(LoginShellEnv, sh)
	runs := func() int {
		b, _ := os.ReadFile(counter)
		return strings.Count(string(b), "x")
	}
	s, err := HostShell(ctx, HostShellOptions{CacheDir: dir})
	if err != nil || s.Origin != Captured || !slices.Contains(s.Env, "FROM_SHELL=1") {
		t.Fatalf("first: %+v %v", s, err)
	}
	st, err := os.Stat(filepath.Join(dir, CacheFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", st, err)
	}
	s, err = HostShell(ctx, HostShellOptions{CacheDir: dir})
	if err != nil || s.Origin != FromCache || runs() != 1 {
		t.Fatalf("second: %+v %v runs=%d", s, err, runs())
	}
	if s, err = HostShell(ctx, HostShellOptions{CacheDir: dir, Refresh: true}); err != nil || s.Origin != Captured || runs() != 2 {
		t.Fatalf("refresh: %+v %v runs=%d", s, err, runs())
	}
	// Another shell is another capture.
	t.Setenv(LoginShellEnv, fakeShell(t, "shift; exec /bin/sh \"$@\"\n"))
	if s, err = HostShell(ctx, HostShellOptions{CacheDir: dir}); err != nil || s.Origin != Captured || slices.Contains(s.Env, "FROM_SHELL=1") {
		t.Fatalf("new shell: %+v %v", s, err)
	}
}
