//go:build !unix

package mcp

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

// killGroup does nothing: without process groups the only handle is a pid
// that may have been reused by then. The SDK's close still terminates the
// server process itself.
func killGroup(int) {}
