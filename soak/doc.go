// Package soak holds the long reliability tests of svc, which run the real
// `svc serve` binary: TestMixedLoad (minutes of mixed traffic while the
// server's RSS, goroutines and open files are sampled and checked for
// growth), TestKillLoop (submit runs, kill -9 the server at a random
// moment, restart it on the same store, and check that every accepted run
// ended consistently) and TestResumeLoop (the same with agents on llmsim
// whose model calls take a second: every accepted run is resumed and ends
// completed with its own output, and no model call of a task is made twice
// unless a kill cut it) on SQLite, Pebble and Redis.
//
// They are built only with the soak build tag and run by `make soak`;
// without the tag each test skips saying how to run it. RELIABILITY.md
// records their figures.
package soak
