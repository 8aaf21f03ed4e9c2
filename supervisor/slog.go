package supervisor

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapHandler is a slog.Handler writing to zap, so protoactor's logs go where
// the runtime's go instead of to its own stderr logger.
type zapHandler struct {
	l      *zap.Logger
	fields []zap.Field
	group  string
}

func newZapHandler(l *zap.Logger) *zapHandler { return &zapHandler{l: l} }

func level(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		// protoactor logs routine lifecycle at info (every supervised
		// restart, every dead letter); that is debug detail for us.
		return zapcore.DebugLevel
	}
	return zapcore.DebugLevel
}

func (h *zapHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.l.Core().Enabled(level(l))
}

func (h *zapHandler) Handle(_ context.Context, r slog.Record) error {
	ce := h.l.Check(level(r.Level), r.Message)
	if ce == nil {
		return nil
	}
	fields := make([]zap.Field, 0, len(h.fields)+r.NumAttrs())
	fields = append(fields, h.fields...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, h.field(a))
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *zapHandler) field(a slog.Attr) zap.Field {
	key := a.Key
	if h.group != "" {
		key = h.group + "." + key
	}
	return zap.Any(key, a.Value.Resolve().Any())
}

func (h *zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.fields = append(append([]zap.Field(nil), h.fields...), make([]zap.Field, 0, len(attrs))...)
	for _, a := range attrs {
		c.fields = append(c.fields, h.field(a))
	}
	return &c
}

func (h *zapHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
