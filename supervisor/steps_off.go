//go:build nosteps

package supervisor

// recordSteps: see steps_on.go.
const recordSteps = false
