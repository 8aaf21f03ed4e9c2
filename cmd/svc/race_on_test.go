//go:build race

package main

// raceEnabled builds the binary under test with -race when the tests run
// with it, so data races in the server and runtime surface here too.
const raceEnabled = true
