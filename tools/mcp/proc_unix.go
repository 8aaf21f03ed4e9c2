//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts a stdio server in a process group of its own, so
// what it starts (npx starts node, say) can be killed with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the process group a stdio server leads.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
