package spec

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestLaunchValidate(t *testing.T) {
	tests := []struct {
		l  Launch
		ok bool
	}{
		{Launch{}, true},
		{Launch{EnvPolicy: EnvInherit}, true},
		{Launch{EnvPolicy: EnvClean}, true},
		{Launch{EnvPolicy: EnvHostShell}, true},
		{Launch{EnvPolicy: EnvToolchain, Env: map[string]string{"GIT_DIR": "/x", "EMPTY": ""}}, true},
		{Launch{EnvPolicy: "sandbox"}, false},
		{Launch{Env: map[string]string{"": "x"}}, false},
		{Launch{Env: map[string]string{"A=B": "x"}}, false},
		{Launch{Env: map[string]string{"A": "x\x00y"}}, false},
	}
	for _, tc := range tests {
		e := Environment{Launch: tc.l}
		err := e.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%+v: %v", tc.l, err)
		}
	}
}

func TestLaunchInSpecFiles(t *testing.T) {
	e, err := Parse([]byte("env_policy: toolchain\nenv:\n  GIT_DIR: /repo/.git\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e.EnvPolicy != EnvToolchain || e.Env["GIT_DIR"] != "/repo/.git" {
		t.Fatalf("%+v", e.Launch)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ Launch }
	if err := json.Unmarshal(b, &back); err != nil || back.EnvPolicy != EnvToolchain || back.Env["GIT_DIR"] != "/repo/.git" {
		t.Fatalf("round trip through %s: %+v %v", b, back, err)
	}
	if _, err := Parse([]byte("envpolicy: clean\n")); err == nil {
		t.Error("a misspelt field was accepted")
	}
}

func TestMayChangePath(t *testing.T) {
	for l, want := range map[*Launch]bool{
		{}:                                   false,
		{EnvPolicy: EnvInherit}:              false,
		{EnvPolicy: EnvClean}:                true,
		{EnvPolicy: EnvToolchain}:            true,
		{Env: map[string]string{"PATH": ""}}: true,
		{Env: map[string]string{"X": ""}}:    false,
	} {
		if got := l.MayChangePath(); got != want {
			t.Errorf("%+v: %v", *l, got)
		}
	}
}
