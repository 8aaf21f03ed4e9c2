// Package zapslog hands the logs of libraries that log through log/slog
// (protoactor, the MCP SDK) to zap, through go.uber.org/zap/exp/zapslog,
// one level lower: info records become debug, because both libraries log
// routine lifecycle (every supervised restart, every dead letter, every
// session) at info, which is detail for an operator. That level shift is
// all this package adds.
package zapslog

import (
	"context"
	"log/slog"
	"math"

	"go.uber.org/zap"
	zslog "go.uber.org/zap/exp/zapslog"
)

// New returns a handler writing to l: error and warn records at those
// levels, the rest at debug. Records carry l's name and fields, no caller
// and no stack trace (the caller would be the library's logging helper).
func New(l *zap.Logger) slog.Handler {
	return demote{zslog.NewHandler(l.Core(), zslog.WithName(l.Name()), zslog.AddStacktraceAt(slog.Level(math.MaxInt)))}
}

// demote lowers info records (and anything between info and warn) to
// debug before zapslog sees them.
type demote struct{ h slog.Handler }

func level(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (d demote) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, level(l))
}

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	r.Level = level(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demote) WithAttrs(attrs []slog.Attr) slog.Handler { return demote{d.h.WithAttrs(attrs)} }

func (d demote) WithGroup(name string) slog.Handler { return demote{d.h.WithGroup(name)} }
