package zapslog_test

import (
	"fmt"
	"log/slog"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/internal/zapslog"
)

func TestLevelsAttrsAndGroups(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := slog.New(zapslog.New(zap.New(core).Named("lib")))
	l.Error("broken", "code", 7)
	l.Warn("odd")
	l.Info("routine")
	l.With("actor", "a1").WithGroup("req").Info("nested", "id", "x")

	got := logs.AllUntimed()
	if len(got) != 4 {
		t.Fatalf("%d entries, want 4", len(got))
	}
	want := []zapcore.Level{zapcore.ErrorLevel, zapcore.WarnLevel, zapcore.DebugLevel, zapcore.DebugLevel}
	for i, e := range got {
		if e.Level != want[i] {
			t.Errorf("%q at %v, want %v", e.Message, e.Level, want[i])
		}
	}
	if got[0].ContextMap()["code"] != int64(7) {
		t.Errorf("attrs of the error record: %v", got[0].ContextMap())
	}
	if m := got[3].ContextMap(); m["actor"] != "a1" || fmt.Sprint(m["req"]) != "map[id:x]" {
		t.Errorf("attrs and group: %v", m)
	}
	if got[0].LoggerName != "lib" || got[0].Stack != "" {
		t.Errorf("name %q, stack %q: want the logger's name and no stack", got[0].LoggerName, got[0].Stack)
	}

	// A logger at info drops what the handler maps to debug, before any
	// work is done.
	infoCore, infoLogs := observer.New(zapcore.InfoLevel)
	slog.New(zapslog.New(zap.New(infoCore))).Info("routine")
	if infoLogs.Len() != 0 {
		t.Error("an info record reached an info-level logger; the handler maps it to debug")
	}
}
