package mcp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is the guard's stdout, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The guard in one process, as the SDK sees it: bad lines are answered
// by the guard and never reach the SDK; a request's line does; the SDK's
// reader gets EOF only after the response to every request it was given
// is written, however early stdin ended (run under -race in CI).
func TestStdioGuard(t *testing.T) {
	in := strings.NewReader("{bad\n[1]\n\"x\"\n" + `{"jsonrpc":"2.0","id":5,"method":"tools/call"}` + "\n")
	out := &lockedBuffer{}
	s := newStdio(in, out)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go s.pump(ctx, pw)
	sdk := bufio.NewReader(pr)
	line, err := sdk.ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":5`) {
		t.Fatalf("the SDK's first line: %q %v", line, err)
	}
	eof := make(chan error, 1)
	go func() {
		_, err := sdk.ReadString('\n')
		eof <- err
	}()
	select {
	case err := <-eof:
		t.Fatalf("the SDK saw the end (%v) before request 5 was answered", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := s.write([]byte(`{"jsonrpc":"2.0","id":5,"result":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Fatalf("after the answer: %v, want EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no EOF after every request was answered")
	}
	got := out.String()
	for _, want := range []string{`"code":-32700`, `"batches are not supported`, `"a JSON-RPC message is a JSON object"`, `"id":5,"result"`} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %s:\n%s", want, got)
		}
	}
}
