package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	svc "github.com/svc-dev/svc"
)

// CheckHost refuses a request whose Host header names a host that is not
// allowed, with 421 and a MisdirectedRequestError, before anything else
// reads it. It closes DNS rebinding: a page on evil.example whose name is
// made to resolve to 127.0.0.1 calls a server on loopback "same-origin",
// so the Origin check lets it through; its Host header still says
// evil.example. Allowed are "localhost", the loopback addresses
// (127.0.0.0/8, ::1), listen (the host the server listens on) and each
// name of allowed; the port is not compared (a rebinding page can use any
// port, and the name is what it cannot forge). Names are compared without
// regard to case. A request without a Host header (HTTP/1.0) passes: no
// browser sends one.
func CheckHost(listen string, allowed []string) (func(http.Handler) http.Handler, error) {
	allow := map[string]bool{"localhost": true}
	add := func(h string) error {
		h = normalHost(h)
		if h == "" || strings.ContainsAny(h, "/:@ *") && net.ParseIP(h) == nil {
			return fmt.Errorf("server: allowed host %q: want a host name or an IP address, no scheme, port or wildcard", h)
		}
		allow[h] = true
		return nil
	}
	if listen != "" {
		if err := add(listen); err != nil {
			return nil, err
		}
	}
	for _, h := range allowed {
		if err := add(h); err != nil {
			return nil, err
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Host == "" || hostAllowed(allow, r.Host) {
				next.ServeHTTP(w, r)
				return
			}
			writeProblem(w, r, http.StatusMisdirectedRequest, Problem{Error: string(svc.KindMisdirectedRequest),
				Detail: fmt.Sprintf("host %q is not served here: a server on loopback without --auth-token answers only localhost, its loopback addresses and the hosts of svc serve --allowed-hosts", truncate(r.Host, 100))})
		})
	}, nil
}

// hostAllowed reports whether the Host header value host names an allowed
// host or a loopback address.
func hostAllowed(allow map[string]bool, host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = normalHost(h)
	if allow[h] {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// normalHost is host name h as allowed hosts are compared: lower case,
// without IPv6 brackets or a trailing dot.
func normalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
}

// IsLoopbackHost reports whether a server listening on host (an --host
// value: a name or an address) is reachable from this machine only:
// "localhost" or a loopback address.
func IsLoopbackHost(host string) bool {
	h := strings.ToLower(strings.Trim(host, "[]"))
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
