package mcp

import "github.com/svc-dev/svc"

// PID returns the stdio subprocess of a source's current session, 0 when
// there is none.
func PID(src svc.ToolSource) int {
	s, ok := src.(*server)
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subPID
}
