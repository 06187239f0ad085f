package spec

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"2s": 2 * time.Second, "1d": 24 * time.Hour, "1d2h": 26 * time.Hour, "0s": 0} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1s", "x", "1dd", "d", "-1d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"2s", "1d", "7d12h", "-3m", "1e9s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("%q gave negative %v", s, d)
		}
	})
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		e    Environment
		ok   bool
	}{
		{"defaults", Environment{}, true},
		{"detach needs expiry", Environment{Lifetime: Lifetime{OwnerExit: "detach"}}, false},
		{"detach with ttl", Environment{Lifetime: Lifetime{OwnerExit: "detach", MaxRuntime: Duration(time.Minute)}}, true},
		{"ttl and until", Environment{Lifetime: Lifetime{UntilStopped: true, MaxRuntime: Duration(time.Minute)}}, false},
		{"ttl under grace", Environment{Lifetime: Lifetime{MaxRuntime: Duration(time.Second)}}, false},
		{"bad owner", Environment{Lifetime: Lifetime{OwnerExit: "x"}}, false},
		{"bad label", Environment{Labels: map[string]string{"a b": "x"}}, false},
		{"bad tier", Environment{Tier: "v1"}, false},
	}
	for _, c := range cases {
		err := c.e.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: not ErrInvalid: %v", c.name, err)
		}
	}
}

func TestParseSpecFile(t *testing.T) {
	good := `
purpose: agent run
trees:
  project: {kind: overlay, source: /srv/base/project}
view:
  replace: {/work/project: project}
  read_only: [/etc]
  share: [/run/postgresql]
  scratch: [/tmp]
limits: {memory: 8GiB, cpus: 2, pids: 4096}
lifetime: {max_runtime: 20m, grace: 2s, owner_exit: stop}
retention: {trees: 24h, evidence: 168h}
`
	e, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if e.Limits.Memory != 8<<30 || time.Duration(e.Lifetime.MaxRuntime) != 20*time.Minute || time.Duration(*e.Retention.Evidence) != 168*time.Hour {
		t.Fatalf("%+v", e)
	}
	j := `{"trees": {"p": {"kind": "copy", "source": "/x"}}, "view": {"replace": {"/w": "p"}}, "lifetime": {"until_stopped": true}}`
	if _, err := Parse([]byte(j)); err != nil {
		t.Fatalf("json: %v", err)
	}
	for _, empty := range []string{"", "# nothing\n"} {
		if e, err := Parse([]byte(empty)); err != nil || e == nil {
			t.Fatalf("an empty file %q: %v, want an empty request", empty, err)
		}
	}
	_, err = Parse([]byte("trees: {}\nbogus: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field error should name line and field: %v", err)
	}
	// One line, saying what to do, not the decoder's multi-line text
	// (issue 39, item 14).
	_, err = Parse([]byte("bogus: 1\nlifetme: {}\n"))
	if err == nil || strings.ContainsAny(err.Error(), "\n") || strings.Contains(err.Error(), "unmarshal errors") ||
		!strings.Contains(err.Error(), "line 1: unknown field bogus") || !strings.Contains(err.Error(), "line 2: unknown field lifetme") || !strings.Contains(err.Error(), "docs/spec.md") {
		t.Fatalf("two unknown fields: %q", err)
	}
	_, err = Parse([]byte(`{"view": {"replce": {}}}`))
	if err == nil || !strings.Contains(err.Error(), "replce") {
		t.Fatalf("unknown nested json field: %v", err)
	}
}

func TestValidateView(t *testing.T) {
	base := func() Environment {
		return Environment{
			Trees: map[string]Tree{"p": {Kind: KindOverlay, Source: "/srv/p"}},
			View:  View{Replace: map[string]string{"/work/p": "p"}},
		}
	}
	bad := map[string]func(e *Environment){
		"relative target":  func(e *Environment) { e.View.Replace = map[string]string{"work": "p"} },
		"relative ro":      func(e *Environment) { e.View.ReadOnly = []string{"etc"} },
		"duplicate target": func(e *Environment) { e.View.ReadOnly = []string{"/work/p/"} },
		"root target":      func(e *Environment) { e.View.Scratch = []string{"/"} },
		"unknown tree":     func(e *Environment) { e.View.Replace = map[string]string{"/w": "q"} },
		"unused tree":      func(e *Environment) { e.Trees["q"] = Tree{Kind: KindCopy, Source: "/q"} },
		"no kind":          func(e *Environment) { e.Trees["p"] = Tree{Source: "/srv/p"} },
		"bad kind":         func(e *Environment) { e.Trees["p"] = Tree{Kind: "zfs", Source: "/srv/p"} },
		"both sources":     func(e *Environment) { e.Trees["p"] = Tree{Kind: KindBtrfs, Source: "/a", Baseline: "b"} },
		"relative source":  func(e *Environment) { e.Trees["p"] = Tree{Kind: KindCopy, Source: "a"} },
		"tiny memory":      func(e *Environment) { e.Limits.Memory = 100 },
		"negative cpus":    func(e *Environment) { e.Limits.CPUs = -1 },
	}
	for name, mut := range bad {
		e := base()
		mut(&e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	e := base()
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("trees: {p: {kind: copy, source: /x}}\nview: {replace: {/w: p}}\n"))
	f.Add([]byte(`{"limits": {"memory": "1G", "cpus": 0.5}}`))
	f.Add([]byte("lifetime: {max_runtime: 3d}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b)
		if err == nil {
			_ = e.Validate()
		}
	})
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64M": 64 << 20, "8GiB": 8 << 30, "1024": 1024, "1.5G": 3 << 29, "2k": 2048} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v", in, got, err)
		}
	}
	for _, in := range []string{"", "G", "-1M", "5Q", "1e30T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzNameMatchers: the written-out matchers of label keys and tree names
// accept exactly what their regular expressions do.
func FuzzNameMatchers(f *testing.F) {
	for _, s := range []string{"", "a", "A9", "team", "a.b/c-d_e", "_x", ".x", "-x", "x y", "é", strings.Repeat("a", 63), strings.Repeat("a", 64), "a\x00", "a/b"} {
		f.Add(s)
	}
	key := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)
	tree := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := labelKey.MatchString(s), key.MatchString(s); got != want {
			t.Errorf("labelKey(%q) = %v, the regular expression says %v", s, got, want)
		}
		if got, want := treeName.MatchString(s), tree.MatchString(s); got != want {
			t.Errorf("treeName(%q) = %v, the regular expression says %v", s, got, want)
		}
	})
}
