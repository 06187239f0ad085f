package engine

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/jsonfast/jsonfasttest"
	"github.com/habemus-papadum/hostfork/spec"
)

// slowSpecReads are the readers the fast ones replace.
func slowSpecReads(raw []byte) (spec.Launch, bool) {
	var full struct{ spec.Launch }
	_ = json.Unmarshal(raw, &full)
	var s struct {
		Limits struct {
			AllowWeaker bool `json:"allow_weaker"`
		} `json:"limits"`
	}
	allow := json.Unmarshal(raw, &s) == nil && s.Limits.AllowWeaker
	return full.Launch, allow
}

func checkSpecReads(t *testing.T, raw []byte, mustDecide bool) {
	t.Helper()
	wantLaunch, wantAllow := slowSpecReads(raw)
	if got := launchOf(raw); !reflect.DeepEqual(got, wantLaunch) {
		t.Fatalf("%s: launch %#v, want %#v", raw, got, wantLaunch)
	}
	allow, decided := acceptsWeaker(raw)
	if decided && allow != wantAllow {
		t.Fatalf("%s: allow_weaker %v, want %v", raw, allow, wantAllow)
	}
	if mustDecide && !decided {
		t.Fatalf("%s: a request hostfork wrote was not read by the fast reader", raw)
	}
}

func TestStoredRequestReaders(t *testing.T) {
	f := jsonfasttest.New(9, 10)
	for range 2000 {
		var e spec.Environment
		f.Fill(reflect.ValueOf(&e).Elem())
		raw, err := json.Marshal(&e)
		if err != nil {
			continue
		}
		checkSpecReads(t, raw, true)
	}
	for _, d := range specOddities {
		checkSpecReads(t, []byte(d), false)
	}
}

var specOddities = []string{
	``, `null`, `{}`, `[]`, `{"limits":null}`, `{"limits":[]}`, `{"limits":{"allow_weaker":true}}`, `{"limits":{"Allow_Weaker":true}}`,
	`{"limits":{"allow_weaker":true,"allow_weaker":false}}`, `{"limits":{"allow_weaker":1}}`, `{"limits":{"memory":[1]},"env":{"A":"1"}}`,
	`{"env_policy":"clean","env":{"A":"1","B":null}}`, `{"ENV":{"A":"1"}}`, `{"env":{"A":"1"},"env":{"B":"2"}}`, `{"env_policy":3}`,
	`{"lifetime":{"grace":"2s"},"limits":{"cpus":1.5,"allow_weaker":false}}`,
}

func FuzzStoredRequestReaders(f *testing.F) {
	for _, d := range specOddities {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkSpecReads(t, raw, false) })
}
