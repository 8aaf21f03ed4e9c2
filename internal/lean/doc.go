// Package lean owns the runtime's speed tricks: the four pieces that keep
// a parked run (an agent loop waiting on its model) under 6 KiB and a
// gather of echo tasks near a quarter of bare goroutines' throughput.
// Each replaces something plain Go or protoactor already has; the
// reference run path (actors/plain) is the same semantics with
// none of them, and is the place to start reading.
//
// The numbers are from BENCHMARKS.md, measured with
//
//	SVC_BENCH_INFLIGHT=100000 go test -run '^$' -bench MillionInFlight -benchtime 1x ./bench/
//	go test -run '^$' -bench 'GatherEcho$' -benchtime 3x ./bench/   # benchmark 11a
//
// (the million-run figure without SVC_BENCH_INFLIGHT).
//
// # Pool (NewPool, NewBoundedPool)
//
// Runs functions on reused goroutines. Why: a new goroutine starts on a
// 2 KiB stack that the agent loop grows several times, and copying stacks
// was a third of the CPU of the gather benchmark; a reused goroutine keeps
// its grown stack. Its idle workers wait on a sync.Cond of their own (80
// bytes; a channel per worker was about 190), since a parked run holds
// its worker. Buys: 11a from 57,000 to 118,000 invocations/s (with one
// timer per run instead of one per invocation); the smaller worker, with
// a shallower park path, 6.78 to 6.32 KiB a parked run at 100,000 runs.
// Plain Go: `go f()`.
//
// # Dispatcher (NewDispatcher, NewDispatcherPool)
//
// The actor.Dispatcher of the runtime's actors: mailboxes run on a
// bounded pool, at most max(256, 64×GOMAXPROCS) at once, the rest queued
// in order under the pool's own lock. Why: actors never block in Receive,
// so more goroutines than cores add nothing, and protoactor's default
// dispatcher (a goroutine per scheduled mailbox) left thousands of idle
// 8 KiB goroutines after a gather's spawn burst. Buys: 0.45 KiB of stack
// a parked run (7.26 to 6.78 KiB at 100,000 runs; 1.107 to 1.003
// goroutines a run); keeping the queue in the pool rather than in a
// dispatcher of its own won back the tenth of 11a that a second mutex
// cost (median ratio 0.217 to 0.262). Plain Go: protoactor's
// actor.NewDefaultDispatcher, or no actors at all.
//
// # Mailbox (NewMailbox)
//
// The invocation actors' actor.Mailbox: protoactor's default semantics
// (system messages first, suspended during a restart, a panic escalated)
// in one 128-byte allocation, each queue keeping its first two messages
// inline. Why: an invocation receives a handful of messages in its life,
// and protoactor's unbounded mailboxes allocate a queue per kind and a
// node per message (about ten allocations, 400 bytes, per invocation).
// Buys: those ten allocations and 400 bytes become one of 128 (the cut
// from 168 to 128 bytes alone: 0.05 KiB of heap a parked run at 100,000
// runs). Plain Go: actor.Unbounded(), or
// a channel.
//
// # Ctx
//
// The cancel state of an invocation's context.Context, embedded in the
// invocation's state rather than made by context.WithCancelCause: Done is
// made only when asked for, a cause is kept in a standard cancel context
// only when there is one, and derived contexts register in a list
// (AfterFunc) instead of a children map. Why: its two allocations (96
// bytes) were held by every parked run. Buys: with results made at the
// finish, 6.25 to 5.95 KiB a parked run at 100,000 runs (5.91 KiB at a
// million, under the 6 KiB target) and one allocation an invocation in
// 11a. Plain Go: ctx, cancel := context.WithCancelCause(parent).
//
// Rules: nothing outside actors/ and the runtime's construction
// (supervisor) uses this package; each trick keeps a test that it
// behaves as its plain equivalent does (ctx_test.go here and in actors/,
// mailbox_test.go, dispatcher_test.go, pool_test.go), and the differential
// test of actors/plain checks that runs come out the same.
package lean
