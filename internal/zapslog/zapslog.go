// Package zapslog is a slog.Handler that writes to zap, so that libraries
// logging through log/slog (protoactor, the MCP SDK) log where the runtime
// logs. Info records become debug: both libraries log routine lifecycle
// (every supervised restart, every dead letter, every session) at info,
// which is detail for an operator.
package zapslog

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// handler is a slog.Handler writing to zap.
type handler struct {
	l      *zap.Logger
	fields []zap.Field
	group  string
}

// New returns a handler writing to l: error and warn records at those
// levels, the rest at debug.
func New(l *zap.Logger) slog.Handler { return &handler{l: l} }

func level(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	}
	return zapcore.DebugLevel
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return h.l.Core().Enabled(level(l))
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
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

func (h *handler) field(a slog.Attr) zap.Field {
	key := a.Key
	if h.group != "" {
		key = h.group + "." + key
	}
	return zap.Any(key, a.Value.Resolve().Any())
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.fields = append(append([]zap.Field(nil), h.fields...), make([]zap.Field, 0, len(attrs))...)
	for _, a := range attrs {
		c.fields = append(c.fields, h.field(a))
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
