package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// The control plane's pure parts; the plane itself is tested with E2B's
// SDK against a real server (sdk_test.go).

func TestMetaFilter(t *testing.T) {
	// As the SDK sends it: encodeURIComponent of each part, joined by
	// URLSearchParams, then the query parameter's own encoding.
	pairs := url.Values{}
	pairs.Set(url.QueryEscape("team/name"), url.QueryEscape("a b&c=d"))
	pairs.Set("n", "1")
	q := url.Values{"metadata": {pairs.Encode()}}.Encode()
	parsed, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := metaFilter(parsed.Get("metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["team/name"] != "a b&c=d" || got["n"] != "1" {
		t.Errorf("metaFilter: %v", got)
	}
	if m, err := metaFilter(""); err != nil || m != nil {
		t.Errorf("empty filter: %v %v", m, err)
	}
	if _, err := metaFilter("a=1&a=2"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a key twice: %v", err)
	}
}

func TestMetaLabels(t *testing.T) {
	got, err := metaLabels(map[string]string{"task": "42", "a.b/c-d_e": "x y"})
	if err != nil || got["e2b.meta/task"] != "42" || got["e2b.meta/a.b/c-d_e"] != "x y" {
		t.Errorf("metaLabels: %v %v", got, err)
	}
	for _, bad := range []map[string]string{
		{"a key": "v"},
		{"-lead": "v"},
		{strings.Repeat("k", 55): "v"},
		{"k": strings.Repeat("v", maxMetaValue+1)},
		{"k": "two\nlines"},
		{"k": "\xff"},
	} {
		if _, err := metaLabels(bad); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("metaLabels(%q): %v, want a refusal naming metadata", bad, err)
		}
	}
	if _, err := metaLabels(map[string]string{strings.Repeat("k", 54): "v"}); err != nil {
		t.Errorf("a 54-character key: %v", err)
	}
}

func TestTimeoutOf(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		in   *int64
		want time.Duration
		bad  bool
	}{
		{nil, DefaultTimeout, false}, {n(0), DefaultTimeout, false}, {n(60), time.Minute, false},
		{n(2), 0, true}, {n(-1), 0, true}, {n(400 * 24 * 3600), 0, true},
	} {
		got, err := timeoutOf(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("timeoutOf(%v) = %v, %v", c.in, got, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	for body, want := range map[string]string{
		`{"allow_internet_access": false}`:                   "network",
		`{"network": {"denyOut": ["0.0.0.0/0"]}}`:            "network",
		`{"volumeMounts": [{"name": "v", "path": "/data"}]}`: "volume",
		`{"mcp": {"x": {}}}`:                                 "MCP",
		`{"autoPauseMemory": true}`:                          "memory",
		`{"autoResume": {"enabled": true}}`:                  "autoResume",
	} {
		var q newSandboxRequest
		if err := json.Unmarshal([]byte(body), &q); err != nil {
			t.Fatal(err)
		}
		if err := q.refusals(); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal naming %q", body, err, want)
		}
	}
	// What the SDKs send by default asks for nothing refused.
	for _, body := range []string{
		`{"templateID": "base", "timeout": 300, "secure": true, "allow_internet_access": true}`,
		`{"templateID": "base", "network": null, "iam": {}, "autoResume": {"enabled": false}, "autoPause": true}`,
	} {
		var q newSandboxRequest
		if err := json.Unmarshal([]byte(body), &q); err != nil {
			t.Fatal(err)
		}
		if err := q.refusals(); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"base", "my-tmpl_2", "A"} {
		if !templateName(ok) {
			t.Errorf("templateName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "../x", "a/b", "a.yaml", "-x", strings.Repeat("a", 64)} {
		if templateName(bad) {
			t.Errorf("templateName(%q) = true", bad)
		}
	}
	id, err := newID()
	if err != nil || len(id) != 20 || !validID(id) {
		t.Errorf("newID: %q %v", id, err)
	}
	for _, bad := range []string{"", "A", "a,b", "a=b", strings.Repeat("a", 65), "../x"} {
		if validID(bad) {
			t.Errorf("validID(%q) = true", bad)
		}
	}
}

func TestPlaneStatus(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("x: %w", api.ErrNotFound):     404,
		fmt.Errorf("x: %w", api.ErrInvalid):      400,
		fmt.Errorf("x: %w", errState):            409,
		fmt.Errorf("x: %w", errRefused):          501,
		fmt.Errorf("x: %w", api.ErrStoreFull):    503,
		errors.New("something else"):             500,
		fmt.Errorf("x: %w", api.ErrUnsupported):  400,
		fmt.Errorf("x: %w", api.ErrEnvNotActive): 409,
	} {
		if got := planeStatus(err); got != want {
			t.Errorf("planeStatus(%v) = %d, want %d", err, got, want)
		}
	}
}

// TestPageAfter resumes a listing after the page token, also when the
// sandbox the token names is gone.
func TestPageAfter(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	sb := func(id string, sec int) sandboxInfo {
		return sandboxInfo{SandboxID: id, StartedAt: t0.Add(time.Duration(sec) * time.Second)}
	}
	// Newest first, ties by id, as list sorts them.
	desc := []sandboxInfo{sb("e", 40), sb("c", 30), sb("d", 30), sb("b", 20), sb("a", 10)}
	asc := []sandboxInfo{sb("a", 10), sb("b", 20), sb("c", 30), sb("d", 30), sb("e", 40)}
	ids := func(l []sandboxInfo) string {
		var s []string
		for _, a := range l {
			s = append(s, a.SandboxID)
		}
		return strings.Join(s, "")
	}
	for _, c := range []struct {
		name string
		out  []sandboxInfo
		asc  bool
		tok  string
		want string
	}{
		{"no token", desc, false, "", "ecdba"},
		{"present", desc, false, pageToken(desc[1]), "dba"},
		{"the last", desc, false, pageToken(desc[4]), ""},
		{"gone between", desc, false, pageToken(sb("x", 25)), "ba"},
		{"gone in a tie", desc, false, pageToken(sb("cc", 30)), "dba"},
		{"gone, newer than all", desc, false, pageToken(sb("z", 50)), "ecdba"},
		{"gone, older than all", desc, false, pageToken(sb("0", 5)), ""},
		{"ascending, gone between", asc, true, pageToken(sb("x", 25)), "cde"},
		{"ascending, gone before all", asc, true, pageToken(sb("0", 5)), "abcde"},
		{"ascending, present", asc, true, pageToken(asc[2]), "de"},
	} {
		got, err := pageAfter(c.out, c.tok, c.asc)
		if err != nil || ids(got) != c.want || got == nil {
			t.Errorf("%s: %q %v (nil %v), want %q", c.name, ids(got), err, got == nil, c.want)
		}
	}
	for _, tok := range []string{"!!", "bm8tc3BhY2U", "YmFkIHRpbWU"} { // not base64, "no-space", "bad time"
		if _, err := pageAfter(desc, tok, false); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("token %q: %v, want ErrInvalid", tok, err)
		}
	}
}
