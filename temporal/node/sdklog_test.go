package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// TestSDKLogger: a record carrying a CanceledError is lowered to INFO, also
// through With; any other error keeps its level.
func TestSDKLogger(t *testing.T) {
	var buf bytes.Buffer
	l := SDKLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	w := sdklog.With(l, "ActivityType", "Exec")
	w.Error("Activity error.", "Error", temporal.NewCanceledError("record"))
	w.Warn("RecordActivityHeartbeat with error", "Error", temporal.NewCanceledError())
	w.Error("Activity error.", "Error", temporal.NewApplicationError("boom", "HostforkError"))
	w.Warn("Failed to poll", "Error", errors.New("unavailable"))
	want := []string{"INFO", "INFO", "ERROR", "WARN"}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var rec struct {
			Level, ActivityType string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Level != want[i] || rec.ActivityType != "Exec" {
			t.Errorf("line %d: %s, want level %s with ActivityType", i, line, want[i])
		}
	}
}
