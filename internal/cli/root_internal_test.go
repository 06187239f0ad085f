package cli

import (
	"errors"
	"io"
	"slices"
	"testing"
)

// The verb table names each verb as the command it builds does: a call
// that names a verb builds that verb alone (verbOf), so a wrong name or a
// missing alias would make the verb unknown.
func TestVerbTableMatchesTheCommands(t *testing.T) {
	full, _ := newRoot(io.Discard, io.Discard, Verbs{}, "")
	cmds := full.Commands()
	if len(cmds) != len(verbs) {
		t.Fatalf("the root has %d commands, the verb table %d", len(cmds), len(verbs))
	}
	for _, v := range verbs {
		c, _, err := full.Find([]string{v.name})
		if err != nil || c == full || c.Name() != v.name {
			t.Errorf("verb %q: the root finds %v (%v)", v.name, c.Name(), err)
			continue
		}
		if !slices.Equal(c.Aliases, v.aliases) {
			t.Errorf("verb %q: aliases %q in the table, %q on the command", v.name, v.aliases, c.Aliases)
		}
		if got := c.Annotations[remoteKey]; (v.local == "" && got != remoteOK) || (v.local != "" && got != v.local) {
			t.Errorf("verb %q: remote annotation %q", v.name, got)
		}
		for _, n := range append([]string{v.name}, v.aliases...) {
			only, _ := newRoot(io.Discard, io.Discard, Verbs{}, verbOf([]string{n, "--help"}))
			if cs := only.Commands(); len(cs) != 1 || cs[0].Name() != v.name {
				t.Errorf("verb %q named %q: the root built for it has %d commands", v.name, n, len(cs))
			}
		}
	}
}

func TestVerbOf(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "run"},
		{[]string{"--root", "/x", "run", "--", "true"}, "run"},
		{[]string{"--root=/x", "--host", "unix:///s", "ps"}, "ps"},
		{[]string{"list"}, "ps"},
		{[]string{"resume", "e1"}, "resume"},
		{[]string{"baseline", "list"}, "baseline"},
		{nil, ""},
		{[]string{"--help"}, ""},
		{[]string{"-h", "run"}, ""},
		{[]string{"help", "run"}, ""},
		{[]string{"completion", "bash"}, ""},
		{[]string{"__complete", "ru"}, ""},
		{[]string{"rnu"}, ""},
		{[]string{"--root"}, ""},
		{[]string{"--", "run"}, ""},
	} {
		if got := verbOf(c.args); got != c.want {
			t.Errorf("verbOf(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// errText puts a joined error on one line ("; " between its parts) and
// still escapes what a record could smuggle in.
func TestErrText(t *testing.T) {
	err := errors.Join(errors.New("command a: stop: permission denied"), errors.New("command b: purpose \x1b[2J"))
	if got, want := errText(err), `command a: stop: permission denied; command b: purpose \x1b[2J`; got != want {
		t.Fatalf("errText = %q, want %q", got, want)
	}
}
