package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpExplainsFlags guards the --help text users read to configure it.
func TestHelpExplainsFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := newRoot(&out)
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--scenario", "delay_ms", "--rpm", "--tpm", "--latency", "--fault-rate", "--context-window", "--seed", "--window", "/stats/throttled", "/v1/chat/completions", "/v1/messages", "Examples:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadLatencyIsRefused(t *testing.T) {
	var out bytes.Buffer
	cmd := newRoot(&out)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--latency", "uniform", "--addr", "127.0.0.1:0"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "uniform") {
		t.Fatalf("err %v", err)
	}
}
