package webhook

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc"
)

// The server-side request forgery guard. A callback URL comes from
// whoever may submit, and the server POSTs to it from inside its own
// network: without a guard, a client could make it reach what only the
// server can (a metadata service on 169.254.169.254, an admin port on
// localhost, a database on 10.x). So a URL whose host is, or resolves to,
// a loopback, private, link-local, shared (CGNAT), multicast or
// unspecified address is refused at submit, and the same check runs on
// the address each connection actually dials (a net.Dialer Control hook),
// so a name that resolves to a public address at submit and to a private
// one later (DNS rebinding) is refused too. AllowPrivate turns both off
// (tests, receivers on the same host or network).

// shared is 100.64.0.0/10 (RFC 6598), which netip does not call private.
var shared = netip.MustParsePrefix("100.64.0.0/10")

// Blocked reports whether the guard refuses ip.
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || shared.Contains(ip) ||
		(ip.Is4() && ip.As4()[0] == 0) // 0.0.0.0/8, "this network"
}

// Guard checks callback URLs; the zero value refuses private addresses
// and resolves with net.DefaultResolver.
type Guard struct {
	AllowPrivate bool
	Resolver     *net.Resolver
}

// MaxURLLength bounds a callback URL.
const MaxURLLength = 2048

// lookupTimeout bounds the resolution of a callback URL's host at submit.
const lookupTimeout = 5 * time.Second

func bad(format string, args ...any) error {
	return svc.Errorf(svc.KindSpecValidation, "callback_url: "+format, args...)
}

// CheckURL refuses, as a SpecValidationError, a callback URL the server
// will not POST to: not absolute http or https, with user info (a secret
// in a URL ends up in logs and status answers), a fragment, or a host
// that is or resolves to an address Blocked refuses (unless AllowPrivate).
// A host that does not resolve is refused too: the typo shows now, not
// in a day of retries.
func (g Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > MaxURLLength {
		return nil, bad("longer than %d bytes", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad("%q is not a URL", truncate(raw))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("%q: only http and https URLs are called back", truncate(raw))
	case u.Host == "" || u.Hostname() == "":
		return nil, bad("%q: no host", truncate(raw))
	case u.User != nil:
		return nil, bad("%q: user info is not allowed in the URL (put a secret in the path or query, or verify the signature)", truncate(u.Redacted()))
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, bad("%q: a fragment is not sent; remove it", truncate(raw))
	}
	if g.AllowPrivate {
		return u, nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if Blocked(ip) {
			return nil, refused(host, ip)
		}
		return u, nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	// A resolver that does not answer must not hold the submit up.
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	ips, err := r.LookupNetIP(lctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return nil, bad("host %q does not resolve: %v", truncate(host), err)
	}
	for _, ip := range ips {
		if Blocked(ip) {
			return nil, refused(host, ip)
		}
	}
	return u, nil
}

func refused(host string, ip netip.Addr) error {
	return bad("host %q is (or resolves to) %s, a loopback, private, link-local or unspecified address: refused as a server-side request forgery guard (svc serve --webhook-allow-private allows it)",
		truncate(host), ip)
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// Control is a net.Dialer Control hook: it refuses a connection to an
// address Blocked refuses, whatever name led there.
func (g Guard) Control(_, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &net.AddrError{Err: "callback: unparsable address", Addr: address}
	}
	if Blocked(ap.Addr()) {
		return &net.AddrError{Err: "callback: refused by the server-side request forgery guard (a loopback, private, link-local or unspecified address)", Addr: address}
	}
	return nil
}
