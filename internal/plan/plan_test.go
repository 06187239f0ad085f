package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/spec"
)

func facts(existing ...string) Facts {
	ex := map[string]bool{}
	for _, e := range existing {
		ex[e] = true
	}
	return Facts{
		Mounts: []Mount{{"/", "ext4", "rw,relatime"}, {"/proc", "proc", "rw"}, {"/tmp", "tmpfs", "rw"}, {"/work/project/cache", "ext4", "rw"}, {"/srv", "xfs", "ro"}},
		Resolve: func(p string) (Resolved, error) {
			if p == "/link" {
				return Resolved{Path: "/real", Exists: true}, nil
			}
			if p == "/refused" {
				return Resolved{}, errRefused
			}
			return Resolved{Path: p, Exists: ex[p]}, nil
		},
		Protected: []string{"/var/lib/hostfork", "/usr/local/bin/hostfork"},
	}
}

var errRefused = errors.New("refused by the host's facts")

func env(v spec.View, trees ...string) *spec.Environment {
	e := &spec.Environment{View: v, Trees: map[string]spec.Tree{}}
	for _, t := range trees {
		e.Trees[t] = spec.Tree{Kind: spec.KindOverlay, Source: "/srv/" + t}
	}
	return e
}

func TestOrderAndRestore(t *testing.T) {
	e := env(spec.View{
		Replace:  map[string]string{"/work/project": "p"},
		Scratch:  []string{"/tmp"},
		ReadOnly: []string{"/etc"},
		Share:    []string{"/tmp/.X11-unix", "/run/postgresql"},
	}, "p")
	r, err := View(e, facts("/work/project", "/tmp", "/etc", "/tmp/.X11-unix", "/run/postgresql"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, x := range r.Rules {
		order = append(order, x.Kind+":"+x.Target)
	}
	got := strings.Join(order, " ")
	want := "read_only:/etc scratch:/tmp replace:/work/project share:/tmp/.X11-unix share:/run/postgresql"
	if got != want {
		t.Fatalf("order\n got %s\nwant %s", got, want)
	}
	if !r.Rules[3].Restore || r.Rules[4].Restore {
		t.Fatalf("restore flags: %+v", r.Rules[3:])
	}
	if len(r.Rules[2].Hides) != 1 || r.Rules[2].Hides[0] != "/work/project/cache" {
		t.Fatalf("nested mount not reported: %+v", r.Rules[2])
	}
	for _, w := range r.InheritedWritable {
		if strings.HasPrefix(w, "/tmp ") || strings.HasPrefix(w, "/proc") {
			t.Fatalf("covered or pseudo mount listed as inherited writable: %v", r.InheritedWritable)
		}
	}
	if len(r.InheritedWritable) == 0 || !strings.HasPrefix(r.InheritedWritable[0], "/ ") {
		t.Fatalf("root should be inherited writable: %v", r.InheritedWritable)
	}
}

func TestSelfShadowing(t *testing.T) {
	e := env(spec.View{Scratch: []string{"/var/lib"}})
	_, err := View(e, facts("/var/lib"))
	if !errors.Is(err, ErrShadowing) || !strings.Contains(err.Error(), "/var/lib/hostfork") {
		t.Fatalf("want shadowing error naming the store: %v", err)
	}
	e = env(spec.View{Scratch: []string{"/var/lib"}, Share: []string{"/var/lib/hostfork"}})
	if _, err := View(e, facts("/var/lib", "/var/lib/hostfork")); err != nil {
		t.Fatalf("restored store still rejected: %v", err)
	}
	e = env(spec.View{ReadOnly: []string{"/usr"}})
	if _, err := View(e, facts("/usr")); !errors.Is(err, ErrShadowing) {
		t.Fatalf("read-only over the binary should be self-shadowing: %v", err)
	}
}

func TestAliasesAndMissing(t *testing.T) {
	e := env(spec.View{ReadOnly: []string{"/link"}, Scratch: []string{"/real"}})
	if _, err := View(e, facts("/real")); err == nil || !strings.Contains(err.Error(), "same directory") {
		t.Fatalf("alias collision: %v", err)
	}
	e = env(spec.View{ReadOnly: []string{"/link"}})
	r, err := View(e, facts("/real"))
	if err != nil || r.Rules[0].Target != "/real" || r.Rules[0].Requested != "/link" {
		t.Fatalf("alias: %+v %v", r, err)
	}
	e = env(spec.View{Replace: map[string]string{"/nope": "p"}}, "p")
	if _, err := View(e, facts()); err == nil || !strings.Contains(err.Error(), "create the directory first") {
		t.Fatalf("missing target: %v", err)
	}
	e = env(spec.View{Scratch: []string{"/tmp"}, Replace: map[string]string{"/tmp/work": "p"}}, "p")
	r, err = View(e, facts("/tmp"))
	if err != nil || !r.Rules[1].Mkdir {
		t.Fatalf("target inside scratch should be created there: %+v %v", r, err)
	}
	if len(r.Overlaps) != 1 {
		t.Fatalf("overlap not reported: %v", r.Overlaps)
	}
	e = env(spec.View{Share: []string{"/nope"}})
	if _, err := View(e, facts()); err == nil {
		t.Fatal("sharing a missing path accepted")
	}
	// A target the host's facts refuse (another user could redirect it)
	// refuses the whole view.
	e = env(spec.View{Scratch: []string{"/tmp", "/refused"}})
	if _, err := View(e, facts("/tmp", "/refused")); !errors.Is(err, errRefused) {
		t.Fatalf("refused target: %v", err)
	}
}
