package mcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// TestStdioPipedAndBadMessages (issue 39, item 13): a client that pipes its
// requests and closes stdin at once still gets every answer (the run is
// carried out), and a malformed line, a batch, a bare value and an
// oversized line each get a JSON-RPC error while the session goes on.
func TestStdioPipedAndBadMessages(t *testing.T) {
	e := servertest.New(t)
	var in bytes.Buffer
	in.WriteString(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")
	in.WriteString("{not json\n")
	in.WriteString(`[{"jsonrpc":"2.0","id":7,"method":"tools/list"}]` + "\n")
	in.WriteString("42\n")
	in.WriteString(`{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}` + "\n")
	in.WriteString(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"argv":["sh","-c","sleep 1; echo piped"]}}}` + "\n")
	cmd := e.Command("mcp")
	cmd.Stdin = &in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("hostfork mcp: %v\n%s", err, errb.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("hostfork mcp did not end after its stdin did\n%s", errb.String())
	}
	type reply struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	var byID = map[string]reply{}
	var errs []int
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not JSON on stdout: %q", sc.Text())
		}
		if string(r.ID) == "null" || r.ID == nil {
			if r.Error != nil {
				errs = append(errs, r.Error.Code)
			}
			continue
		}
		byID[string(r.ID)] = r
	}
	if len(errs) != 4 || errs[0] != -32700 || errs[1] != -32600 || errs[2] != -32600 || errs[3] != -32600 {
		t.Errorf("want four JSON-RPC errors (parse, batch, not an object, too long), got %v", errs)
	}
	if r, ok := byID["1"]; !ok || r.Error != nil {
		t.Errorf("initialize: %+v", r)
	}
	r, ok := byID["2"]
	if !ok || r.Error != nil || !strings.Contains(string(r.Result), "piped") {
		t.Errorf("the piped run was not carried out and answered: %+v (%s)", r, r.Result)
	}
}
