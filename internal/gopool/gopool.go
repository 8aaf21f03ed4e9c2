// Package gopool runs functions on reused goroutines. A new goroutine starts
// with a 2 KiB stack and the agent loop grows it several times; copying
// stacks was a third of the runtime's CPU in the gather benchmark. Reusing
// goroutines keeps their grown stacks, and idle ones retire on their own.
package gopool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool is an unbounded pool: Go never blocks and never queues; it hands f to
// an idle worker or starts a new one. Workers idle for longer than the idle
// timeout exit. The zero value is not usable; use New.
type Pool struct {
	work chan func()
	stop chan struct{}
	idle time.Duration
	wg   sync.WaitGroup
	once sync.Once
	live atomic.Int64
}

// Workers is the number of live worker goroutines.
func (p *Pool) Workers() int { return int(p.live.Load()) }

// New returns a pool whose workers exit after idle without work.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), stop: make(chan struct{}), idle: idle}
}

// Go runs f on a pooled goroutine. After Close, f runs on a goroutine of its
// own, so nothing handed to the pool is ever dropped.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
		return
	default:
	}
	p.wg.Add(1)
	p.live.Add(1)
	go p.worker(f)
}

func (p *Pool) worker(f func()) {
	defer p.wg.Done()
	defer p.live.Add(-1)
	var t *time.Timer
	for {
		f()
		select {
		case f = <-p.work:
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(p.idle)
		} else {
			t.Reset(p.idle)
		}
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.stop:
			t.Stop()
			return
		}
	}
}

// Close makes idle workers exit and waits for all workers to finish what
// they run. Calling Go after Close still runs f.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// Dispatcher adapts the pool to protoactor's actor.Dispatcher, so actor
// mailboxes are processed on pooled goroutines too.
type Dispatcher struct {
	Pool *Pool
	// N is the number of messages a mailbox processes before yielding.
	N int
}

// Schedule implements actor.Dispatcher.
func (d Dispatcher) Schedule(fn func()) { d.Pool.Go(fn) }

// Throughput implements actor.Dispatcher.
func (d Dispatcher) Throughput() int { return d.N }
