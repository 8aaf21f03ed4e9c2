package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc/internal/testutil"
)

// lockedBuf is a bytes.Buffer safe for the flushing goroutine and the test.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// svc serve's log is buffered (issue 15), but a user watching it still
// sees each line soon after it is logged, without the server stopping,
// and nothing logged before the server stops is lost.
func TestServeLogBufferedLinesArrive(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, format := range []string{"console", "json"} {
		t.Run(format, func(t *testing.T) {
			var out lockedBuf
			f := &runtimeFlags{logLevel: "info", logFormat: format}
			log, stop, err := f.bufferedLogger(&out)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("svc serving")
			testutil.Eventually(t, "the first line written out while the logger runs", func() bool {
				return strings.Contains(out.String(), "svc serving")
			})
			for range 50 { // under json's sampling threshold (100 a second)
				log.Info("agent_completed")
			}
			log.Debug("below the level")
			stop()
			if got := strings.Count(out.String(), "agent_completed"); got != 50 {
				t.Errorf("%d of 50 lines written out by stop", got)
			}
			if strings.Contains(out.String(), "below the level") {
				t.Error("a debug line was written at --log-level info")
			}
			if format == "json" && !strings.Contains(out.String(), `"msg":"svc serving"`) {
				t.Errorf("--log-format json wrote no JSON:\n%s", out.String())
			}
		})
	}
}

func TestServeLogBadFlags(t *testing.T) {
	for _, f := range []runtimeFlags{{logLevel: "loud", logFormat: "console"}, {logLevel: "info", logFormat: "xml"}} {
		if _, _, err := f.bufferedLogger(&lockedBuf{}); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// BenchmarkServeLogLine is one info line of svc serve's log (an event or
// an access log line) into a file, from 64 goroutines, through the buffer
// and, the baseline, written at once as before issue 15.
func BenchmarkServeLogLine(b *testing.B) {
	f := &runtimeFlags{logLevel: "info", logFormat: "console"}
	for _, buffered := range []bool{true, false} {
		name := "unbuffered"
		if buffered {
			name = "buffered"
		}
		b.Run(name, func(b *testing.B) {
			out, err := os.Create(filepath.Join(b.TempDir(), "serve.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer out.Close()
			log, stop, err := f.bufferedLogger(out)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			if !buffered {
				cfg, _ := f.logConfig()
				log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(cfg.EncoderConfig), zapcore.Lock(out), cfg.Level))
			}
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					log.Info("agent_completed", zap.String("agent", "echo"), zap.String("trace_id", "bench"), zap.Int("duration_ms", 0))
				}
			})
		})
	}
}
