package devserver

import (
	"context"
	"log/slog"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// slogLogger adapts a *slog.Logger to the server's log.Logger. It also
// implements log.SLogWrapper, so the server components that want an slog
// logger get the same one.
type slogLogger struct{ l *slog.Logger }

var (
	_ log.Logger      = slogLogger{}
	_ log.WithLogger  = slogLogger{}
	_ log.SLogWrapper = slogLogger{}
)

func (s slogLogger) Debug(msg string, tags ...tag.Tag) { s.log(slog.LevelDebug, msg, tags) }
func (s slogLogger) Info(msg string, tags ...tag.Tag)  { s.log(slog.LevelInfo, msg, tags) }
func (s slogLogger) Warn(msg string, tags ...tag.Tag)  { s.log(slog.LevelWarn, msg, tags) }
func (s slogLogger) Error(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// DPanic, Panic and Fatal only log: an embedded server must not take its
// host process down.
func (s slogLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }
func (s slogLogger) Panic(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }
func (s slogLogger) Fatal(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }

func (s slogLogger) With(tags ...tag.Tag) log.Logger {
	return slogLogger{s.l.With(attrs(tags)...)}
}

func (s slogLogger) SLog() *slog.Logger { return s.l }

func (s slogLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	s.l.Log(ctx, level, msg, attrs(tags)...)
}

func attrs(tags []tag.Tag) []any {
	out := make([]any, len(tags))
	for i, t := range tags {
		out[i] = slog.Any(t.Key(), t.Value())
	}
	return out
}
