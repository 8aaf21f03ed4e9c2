package main

import (
	"runtime/debug"
	"testing"
)

func TestCommitOf(t *testing.T) {
	t.Parallel()
	rev := "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "unknown"},
		{"no vcs stamp", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "-compiler", Value: "gc"}}}, "unknown"},
		{"clean", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, rev},
		{"dirty", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: rev}}}, rev + "-dirty"},
	}
	for _, tt := range tests {
		if got := commitOf(tt.info); got != tt.want {
			t.Errorf("%s: commitOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}
