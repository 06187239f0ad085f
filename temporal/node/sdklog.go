package node

import (
	"log/slog"

	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// SDKLogger adapts l for the Temporal SDK (client.Options.Logger). It is
// sdklog.NewStructuredLogger with one change: a record that carries a
// temporal.CanceledError is logged at INFO. When a workflow cancels a
// running activity, the SDK logs the activity's CanceledError at ERROR
// ("Activity error.") and the refused heartbeat at WARN
// ("RecordActivityHeartbeat with error"); a cancellation the workflow asked
// for is a normal end, not a fault (decision 106). Any other error keeps
// its level.
func SDKLogger(l *slog.Logger) sdklog.Logger {
	return &sdkLogger{inner: sdklog.Skip(sdklog.NewStructuredLogger(l), 1)}
}

type sdkLogger struct{ inner sdklog.Logger }

func (s *sdkLogger) Debug(msg string, kv ...any) { s.inner.Debug(msg, kv...) }
func (s *sdkLogger) Info(msg string, kv ...any)  { s.inner.Info(msg, kv...) }

func (s *sdkLogger) Warn(msg string, kv ...any) {
	if cancellation(kv) {
		s.inner.Info(msg, kv...)
		return
	}
	s.inner.Warn(msg, kv...)
}

func (s *sdkLogger) Error(msg string, kv ...any) {
	if cancellation(kv) {
		s.inner.Info(msg, kv...)
		return
	}
	s.inner.Error(msg, kv...)
}

func (s *sdkLogger) With(kv ...any) sdklog.Logger {
	return &sdkLogger{inner: sdklog.With(s.inner, kv...)}
}

func (s *sdkLogger) WithCallerSkip(depth int) sdklog.Logger {
	return &sdkLogger{inner: sdklog.Skip(s.inner, depth)}
}

// cancellation reports whether a record's values hold a CanceledError.
func cancellation(kv []any) bool {
	for _, v := range kv {
		if err, ok := v.(error); ok && temporal.IsCanceledError(err) {
			return true
		}
	}
	return false
}
