package spec

import (
	"errors"
	"reflect"
	"testing"
)

func TestApplyProfileAgent(t *testing.T) {
	e := Environment{Profile: ProfileAgent, View: View{Scratch: []string{"/tmp"}}}
	if err := e.ApplyProfile("/home/u"); err != nil {
		t.Fatal(err)
	}
	want := Environment{
		Profile: ProfileAgent,
		Trees:   map[string]Tree{"home": {Kind: KindOverlay, Source: "/home/u"}},
		View: View{
			Replace:      map[string]string{"/home/u": "home"},
			Scratch:      []string{"/tmp", "/var/tmp", "/dev/shm"},
			ReadOnlyRest: true,
		},
	}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("got %+v\nwant %+v", e, want)
	}
	// Applying it again changes nothing (Create plans the plan's spec again).
	if err := e.ApplyProfile("/home/u"); err != nil || !reflect.DeepEqual(e, want) {
		t.Fatalf("second application: %v, %+v", err, e)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestApplyProfileBad(t *testing.T) {
	for name, c := range map[string]struct {
		e    Environment
		home string
	}{
		"unknown":       {Environment{Profile: "nosuch"}, "/home/u"},
		"no home":       {Environment{Profile: ProfileAgent}, ""},
		"root home":     {Environment{Profile: ProfileAgent}, "/"},
		"tree clash":    {Environment{Profile: ProfileAgent, Trees: map[string]Tree{"home": {Kind: KindCopy, Source: "/x"}}}, "/home/u"},
		"unchosen":      {Environment{Profiles: map[string]Profile{"p": {}}}, "/home/u"},
		"missing tree":  {Environment{Profile: "p", Profiles: map[string]Profile{"p": {View: View{Replace: map[string]string{"/x": "t"}}}}}, "/home/u"},
		"bad home path": {Environment{Profile: "p", Profiles: map[string]Profile{"p": {View: View{Scratch: []string{"$HOMEx"}}}}}, "/home/u"},
	} {
		if err := c.e.ApplyProfile(c.home); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// An operator's own profile, defined in the spec, wins over a built-in
// one of the same name, and the spec's own rules win over the profile's.
func TestApplyProfileOwn(t *testing.T) {
	e := Environment{
		Profile:  ProfileAgent,
		Profiles: map[string]Profile{ProfileAgent: {View: View{Scratch: []string{"$HOME/.cache", "/srv"}, ReadOnly: []string{"/opt"}}}},
		View:     View{Share: []string{"/srv"}},
	}
	if err := e.ApplyProfile("/home/u"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.View.Scratch, []string{"/home/u/.cache"}) || !reflect.DeepEqual(e.View.ReadOnly, []string{"/opt"}) || e.View.ReadOnlyRest || len(e.Trees) != 0 {
		t.Fatalf("got %+v", e.View)
	}
}
