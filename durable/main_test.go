package durable

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc/internal/svcproc"
)

// svcBin is the svc binary under test, built once (with the race detector
// when the tests run with it); DURABLE_SVC_BIN names a binary to test
// instead (another build, to compare).
var svcBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "svc-durable-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if svcBin = os.Getenv("DURABLE_SVC_BIN"); svcBin != "" {
		fmt.Fprintln(os.Stderr, "durable: testing", svcBin)
	} else if svcBin, err = svcproc.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
