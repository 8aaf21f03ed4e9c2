package main

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
)

// tricky are strings that zap's JSON escaping treats specially.
var tricky = []string{
	"", "plain", `quote " and \ backslash`, "tab\there\nnewline\rreturn",
	"ctl \x00\x01\x1f\x7f", "unicode é 日本語 😀 \u2028 \u2029", "bad utf-8 \xff\xfe end",
	"<html> & 'single'", "trailing space ", "ends in colon:", "{brace", "µs",
}

// TestFastConsoleMatchesZap: svc serve's console encoder writes, for every
// line, the bytes zap's console encoder writes: the access log's and the
// log emitter's lines, fields of every kind and escaping included, and
// the lines it leaves to zap (named loggers, With context, other field
// kinds, stacks).
func TestFastConsoleMatchesZap(t *testing.T) {
	cfg := zap.NewDevelopmentEncoderConfig()
	zapEnc := zapcore.NewConsoleEncoder(cfg)
	fast := newFastConsole(cfg)
	at := time.Date(2026, 11, 25, 4, 5, 6, 789_123_456, time.UTC)
	caller := zapcore.NewEntryCaller(0, "/work/svc/http/server/standalone.go", 198, true)
	var fieldSets [][]zapcore.Field
	fieldSets = append(fieldSets, nil, []zapcore.Field{})
	fieldSets = append(fieldSets, []zapcore.Field{
		zap.String("method", "POST"), zap.String("path", "/agents/echo/run"), zap.Int("status", 200),
		zap.Int("bytes", 291), zap.Duration("duration", 397701*time.Nanosecond), zap.String("request_id", "bench"),
	})
	for _, s := range tricky {
		fieldSets = append(fieldSets, []zapcore.Field{zap.String(s, s), zap.String("k", s)})
	}
	for _, f := range []float64{0, 0.05, -1.5, 1e21, 1e-7, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)} {
		fieldSets = append(fieldSets, []zapcore.Field{zap.Float64("f", f), zap.Any("any", f)})
	}
	fieldSets = append(fieldSets,
		[]zapcore.Field{zap.Int64("min", math.MinInt64), zap.Int32("i32", -7), zap.Bool("t", true), zap.Bool("f", false), zap.Any("n", 4)},
		[]zapcore.Field{zap.Duration("d0", 0), zap.Duration("dh", 90*time.Minute), zap.Duration("dneg", -time.Microsecond)},
		// Kinds the fast path leaves to zap.
		[]zapcore.Field{zap.String("a", "b"), zap.Error(errors.New("boom"))},
		[]zapcore.Field{zap.Strings("models", []string{"x", "y"})},
		[]zapcore.Field{zap.Any("map", map[string]int{"a": 1})},
		[]zapcore.Field{zap.Float32("f32", 1.5), zap.Uint("u", 3), zap.Time("at", at)},
	)
	entries := []zapcore.Entry{
		{Level: zapcore.InfoLevel, Time: at, Message: "request", Caller: caller},
		{Level: zapcore.InfoLevel, Time: at, Message: "agent_completed"},
		{Level: zapcore.InfoLevel, Time: at.Add(-789 * time.Millisecond), Message: "same second, .000"},
		{Level: zapcore.InfoLevel, Time: at.Add(210 * time.Millisecond), Message: "same second, .999"},
		{Level: zapcore.InfoLevel, Time: at.Add(time.Second), Message: "next second"},
		{Level: zapcore.InfoLevel, Time: at.In(time.FixedZone("Y", -5*3600)), Message: "same second, other zone"},
		{Level: zapcore.InfoLevel, Time: at.Local(), Message: "local"},
		{Level: zapcore.InfoLevel, Time: time.Date(12345, 1, 2, 3, 4, 5, 6e6, time.UTC), Message: "year 12345"},
		{Level: zapcore.InfoLevel, Time: time.Date(-5, 1, 2, 3, 4, 5, 6e6, time.UTC), Message: "year -5"},
		{Level: zapcore.ErrorLevel, Time: at.In(time.FixedZone("X", 3600+1800)), Message: "agent_failed"},
		{Level: zapcore.WarnLevel, Message: "no time, msg with \"quotes\"\tand tab\n"},
		{Level: zapcore.DebugLevel, Time: at, Message: "", Caller: zapcore.NewEntryCaller(0, "nodir.go", 3, true)},
		{Level: zapcore.InfoLevel, Time: at, Message: "named", LoggerName: "svc.sub"},
		{Level: zapcore.ErrorLevel, Time: at, Message: "stack", Stack: "goroutine 1\n\tmain.go:1"},
	}
	for _, ent := range entries {
		for _, fs := range fieldSets {
			compareLines(t, zapEnc, fast, ent, fs)
		}
	}
	// Context added with With: the fast encoder's clone leaves it to zap.
	zc, fc := zapEnc.Clone(), fast.Clone()
	for _, e := range []zapcore.Encoder{zc, fc} {
		e.AddString("component", "x")
		e.AddInt("n", 1)
	}
	compareLines(t, zc, fc, entries[0], fieldSets[2])
	compareLines(t, zapEnc, fast, entries[0], fieldSets[2]) // the original is unchanged
}

func compareLines(t *testing.T, zapEnc, fast zapcore.Encoder, ent zapcore.Entry, fs []zapcore.Field) {
	t.Helper()
	want, err := zapEnc.EncodeEntry(ent, fs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fast.EncodeEntry(ent, fs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("fields %v:\n got %q\nwant %q", fs, got.Bytes(), want.Bytes())
	}
	want.Free()
	got.Free()
}

// TestFastConsoleEventLines: the log emitter's lines for runtime events
// (payload values of the kinds runs emit, and others) are zap's, through
// the whole logger.
func TestFastConsoleEventLines(t *testing.T) {
	cfg := zap.NewDevelopmentEncoderConfig()
	var zapOut, fastOut bytes.Buffer
	at := time.Date(2026, 11, 25, 4, 5, 6, 7_000_000, time.UTC)
	clock := zap.WithClock(fixedClock(at)) // the line's time is the logger's
	zl := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(cfg), zapcore.AddSync(&zapOut), zapcore.DebugLevel), zap.AddCaller(), clock)
	fl := zap.New(zapcore.NewCore(newFastConsole(cfg), zapcore.AddSync(&fastOut), zapcore.DebugLevel), zap.AddCaller(), clock)
	ze, fe := emitters.NewLog(zl), emitters.NewLog(fl)
	for _, ev := range []svc.RuntimeEvent{
		{EventType: svc.EventAgentCompleted, Timestamp: at, AgentName: "echo", TaskID: "t-1", TraceID: "bench", SpanID: "69d173b7724a050f",
			Payload: svc.Payload{"backend": "local", "duration_ms": 0.05, "model": "test:echo", "tokens_used": 4}},
		{EventType: svc.EventAgentSpawned, AgentName: "é\"x", TaskID: "\x01", TraceID: "t", ParentTraceID: "p", ParentSpanID: "ps",
			Payload: svc.Payload{"trust_level": "medium", "agent": "collides", "n": int64(-3), "ok": true}},
		{EventType: svc.EventAgentFailed, AgentName: "a", Payload: svc.Payload{"error": "bad \xff", "list": []string{"x"}, "m": map[string]any{"k": 1}}},
		{AgentName: "no type"},
	} {
		ze.Emit(ev)
		fe.Emit(ev)
	}
	if fastOut.String() != zapOut.String() || zapOut.Len() == 0 {
		t.Errorf("fast:\n%s\nzap:\n%s", fastOut.String(), zapOut.String())
	}
}

// fixedClock is a zapcore.Clock that always reads one time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time                         { return time.Time(c) }
func (c fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }
