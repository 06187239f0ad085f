package launchenv

import (
	"errors"
	"reflect"
	"testing"
)

func TestResolve(t *testing.T) {
	inherited := []string{"PATH=/usr/bin", "HOME=/home/u", "GIT_DIR=/repo/.git", "GIT_CONFIG_GLOBAL=/x", "GIT_CONFIG_COUNT=1",
		"TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/old/go"}
	shell := []string{"PATH=/custom/bin:/usr/bin", "HOME=/home/u", "SECRET_TOKEN=s3cret", "DOTNET_ROOT=/opt/dotnet",
		"GOROOT=/usr/local/go", "GIT_WORK_TREE=/elsewhere", "EDITOR=vi"}
	acct := Account{UID: 1000, Name: "u", Home: "/home/u"}
	capErr := errors.New("exit status 1")
	tests := []struct {
		name     string
		in       Input
		want     []string
		wantNote bool
	}{
		{"inherit drops git redirections",
			Input{Inherited: inherited},
			[]string{"PATH=/usr/bin", "HOME=/home/u", "TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/old/go"}, false},
		{"explicit git redirection is kept",
			Input{Policy: "inherit", Inherited: inherited, Explicit: []string{"GIT_DIR=/mine", "TOKEN=explicit"}},
			[]string{"PATH=/usr/bin", "HOME=/home/u", "TOKEN=explicit", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/old/go", "GIT_DIR=/mine"}, false},
		{"clean",
			Input{Policy: "clean", Inherited: inherited, Account: acct},
			[]string{"PATH=" + DefaultPath, "HOME=/home/u", "USER=u", "LOGNAME=u", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm"}, false},
		{"clean without a caller environment uses the account",
			Input{Policy: "clean", Account: acct},
			[]string{"PATH=" + DefaultPath, "HOME=/home/u", "USER=u", "LOGNAME=u"}, false},
		{"host-shell uses the capture, without its git redirections",
			Input{Policy: "host-shell", Inherited: inherited, Shell: shell},
			[]string{"PATH=/custom/bin:/usr/bin", "HOME=/home/u", "SECRET_TOKEN=s3cret", "DOTNET_ROOT=/opt/dotnet", "GOROOT=/usr/local/go", "EDITOR=vi"}, false},
		{"host-shell capture failure leaves the inherited environment",
			Input{Policy: "host-shell", Inherited: inherited, ShellErr: capErr},
			[]string{"PATH=/usr/bin", "HOME=/home/u", "TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/old/go"}, true},
		{"toolchain overlays only discovery variables",
			Input{Policy: "toolchain", Inherited: inherited, Shell: shell},
			[]string{"PATH=/custom/bin:/usr/bin", "HOME=/home/u", "TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/usr/local/go", "DOTNET_ROOT=/opt/dotnet"}, false},
		{"toolchain capture failure leaves the inherited environment",
			Input{Policy: "toolchain", Inherited: inherited, ShellErr: capErr},
			[]string{"PATH=/usr/bin", "HOME=/home/u", "TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/old/go"}, true},
		{"explicit wins over toolchain",
			Input{Policy: "toolchain", Inherited: inherited, Shell: shell, Explicit: []string{"PATH=/explicit"}},
			[]string{"PATH=/explicit", "HOME=/home/u", "TOKEN=caller", "LANG=C.UTF-8", "LC_TIME=de_DE", "TERM=xterm", "GOROOT=/usr/local/go", "DOTNET_ROOT=/opt/dotnet"}, false},
		{"duplicates: the last value wins at the first position",
			Input{Inherited: []string{"A=1", "B=2", "A=3", "junk", "=x"}},
			[]string{"A=3", "B=2"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Env, tc.want) {
				t.Errorf("env\n got %q\nwant %q", got.Env, tc.want)
			}
			if (got.Note != "") != tc.wantNote {
				t.Errorf("note %q, want note: %v", got.Note, tc.wantNote)
			}
		})
	}
}

func TestResolveRejects(t *testing.T) {
	if _, err := Resolve(Input{Policy: "sandbox"}); !errors.Is(err, ErrPolicy) {
		t.Errorf("unknown policy: %v", err)
	}
	if _, err := Resolve(Input{Explicit: []string{"NOEQUALS"}}); err == nil {
		t.Error("explicit variable without '=' accepted")
	}
}

func TestIsGitRedirection(t *testing.T) {
	for k, want := range map[string]bool{
		"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true, "GIT_OBJECT_DIRECTORY": true,
		"GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_COMMON_DIR": true, "GIT_CONFIG": true,
		"GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_KEY_0": true, "GIT_AUTHOR_NAME": false, "GIT_SSH_COMMAND": false, "DIR": false,
	} {
		if got := IsGitRedirection(k); got != want {
			t.Errorf("IsGitRedirection(%s) = %v", k, got)
		}
	}
}

func TestExplicitFromMap(t *testing.T) {
	got := ExplicitFromMap(map[string]string{"B": "2", "A": "1=x"})
	if !reflect.DeepEqual(got, []string{"A=1=x", "B=2"}) {
		t.Errorf("%q", got)
	}
}
