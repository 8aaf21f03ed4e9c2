package svcproc

import (
	"strings"
	"testing"
)

// TestLogBufKeepsHeadAndTail: a busy server's stderr is bounded to its
// first and last logKeep bytes (the address is in the head, the last
// words in the tail), and a race report is counted even when it arrives
// split across writes and is no longer kept.
func TestLogBufKeepsHeadAndTail(t *testing.T) {
	var b logBuf
	write := func(s string) {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(s))
		}
	}
	write("svc serving url\n")
	write("WARNING: DATA")
	write(" RACE\n")
	for range 1000 {
		write(strings.Repeat("x", 99) + "\n")
	}
	write("the end\n")
	head, tail := b.strings()
	if !strings.HasPrefix(head, "svc serving url\n") || len(head) != logKeep {
		t.Errorf("head is %d bytes starting %q", len(head), head[:min(len(head), 20)])
	}
	if !strings.HasSuffix(tail, "the end\n") || len(tail) != logKeep {
		t.Errorf("tail is %d bytes ending %q", len(tail), tail[max(0, len(tail)-20):])
	}
	if n := b.races(); n != 1 {
		t.Errorf("races = %d, want 1", n)
	}
}
