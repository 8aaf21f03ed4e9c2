//go:build pprof

// This file is only in a binary built with `-tags pprof`, to profile a
// long run (RELIABILITY.md): the default binary serves no profiles.

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"modernc.org/libc"
)

// init serves net/http/pprof on SVC_PPROF_ADDR when it is set. The address
// must be a loopback one: profiles show request data and the route has no
// auth. /debug/libc reports the allocations SQLite made outside the Go heap
// (non-zero only when built with -tags 'pprof memory.counters'). Its own mux keeps the routes off http.DefaultServeMux, which the
// pprof package's init also fills but nothing of svc serves.
func init() {
	addr := os.Getenv("SVC_PPROF_ADDR")
	if addr == "" {
		return
	}
	if err := servePprof(addr); err != nil {
		fmt.Fprintf(os.Stderr, "svc: SVC_PPROF_ADDR: %v\n", err)
		os.Exit(2)
	}
}

// servePprof checks that addr is a loopback host:port and serves the
// profiles there for the life of the process.
func servePprof(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// SQLite (modernc) allocates through its libc, outside the Go heap;
	// its allocator counts only in a build also tagged memory.counters.
	mux.HandleFunc("/debug/libc", func(w http.ResponseWriter, _ *http.Request) {
		st := libc.MemStat()
		fmt.Fprintf(w, "allocs %d\nmapped_bytes %d\nmmaps %d\n", st.Allocs, st.Bytes, st.Mmaps)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// Lives as long as the process: a debugging build's side door, which
	// exits with it.
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "svc: pprof on http://%s/debug/pprof/\n", ln.Addr())
	return nil
}
