package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc/http/server"
)

// BenchmarkStandaloneRun is the HTTP path of a run without the network
// and the runtime (issue 15): POST /agents/echo/run through the
// standalone server's whole handler (request id, access log at info with
// a caller, as svc serve logs, recoverer, origins, router, body decode,
// JSON answer) to an echoing backend, served to a recorder. Its ns/op and
// allocs/op are what the server adds to each run.
func BenchmarkStandaloneRun(b *testing.B) {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zapcore.InfoLevel), zap.AddCaller())
	h, err := server.NewStandalone(&fakeBackend{}, server.StandaloneConfig{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	const body = `{"input":{"text":"hello world"},"request_id":"bench"}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/agents/echo/run", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
