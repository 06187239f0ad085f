package fault

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A pause with a reached file makes the file when its point is reached and
// stands there until the test removes it: what the test does meanwhile is
// not raced by the pause's end, however slow it is.
func TestPauseEndsWhenReachedIsRemoved(t *testing.T) {
	old := armed
	armed = "here~60s"
	t.Cleanup(func() { armed = old })
	reached := filepath.Join(t.TempDir(), "reached")
	t.Setenv(ReachedEnv, reached)
	done := make(chan struct{})
	go func() {
		Point("elsewhere") // not armed: returns at once, makes nothing
		Point("here")
		close(done)
	}()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(reached); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the paused point never made its reached file")
		}
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the pause ended while its reached file was there")
	default:
	}
	if err := os.Remove(reached); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a safety bound, half the pause
		t.Fatal("the pause went on after its reached file was removed")
	}
}
