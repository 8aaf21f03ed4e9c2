//go:build race

package svcproc

// Race is whether the calling test binary runs with the race detector;
// Build then builds svc with it too, so that the server's data races
// surface in the tests that drive it.
const Race = true
