// Package durable holds the end-to-end tests of durable runs: a run
// submitted to the real `svc serve` binary, whose process is killed with
// SIGKILL while one of its steps is in flight, is resumed when the server
// starts again on the same run store, ends with the result a run without
// a kill gives, and pays once for every step completed before the kill:
// the model calls are counted at llmsim, the provider simulator, and the
// tool calls at a test HTTP server. A pipeline, a team and an agent loop
// with tool calls, on the SQLite, Pebble and Redis run stores.
//
// The package has no code of its own outside its tests.
package durable
