package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	svc "github.com/svc-dev/svc"
)

// requireJSON refuses a request whose Content-Type is not application/json
// (a charset parameter, if any, must be UTF-8) with an
// UnsupportedMediaTypeError. Browsers send text/plain, form and multipart
// bodies cross-site without asking first; requiring JSON makes them ask
// (a CORS preflight), which CheckOrigin answers.
func requireJSON(r *http.Request) error {
	vals := r.Header.Values("Content-Type")
	if len(vals) == 0 || vals[0] == "" {
		return svc.Errorf(svc.KindUnsupportedMediaType, "Content-Type is missing: the request body must be application/json")
	}
	if len(vals) > 1 {
		return svc.Errorf(svc.KindUnsupportedMediaType, "several Content-Type headers: the request body must be application/json")
	}
	mt, params, err := mime.ParseMediaType(vals[0])
	if err != nil || mt != "application/json" {
		return svc.Errorf(svc.KindUnsupportedMediaType, "Content-Type %q: the request body must be application/json", truncate(vals[0], 80))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return svc.Errorf(svc.KindUnsupportedMediaType, "Content-Type %q: application/json is UTF-8, not %s", truncate(vals[0], 80), truncate(cs, 40))
	}
	return nil
}

// optionalJSONBody applies requireJSON to a request only when it has a
// body: an empty body needs no Content-Type, on POST /runs/{id}/cancel,
// where the body is optional, and where it is required, so that its
// absence is answered as such (400). A body of unknown length is peeked
// at, and put back.
func optionalJSONBody(r *http.Request) error {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return nil
	case r.ContentLength < 0:
		br := bufio.NewReaderSize(r.Body, 16)
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return nil
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{br, r.Body}
	}
	return requireJSON(r)
}

// The CORS answer to an allowed origin: what the routes take and what a
// page may read of the answer.
const (
	corsAllowMethods  = "GET, POST"
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, X-Request-Id"
	corsExposeHeaders = "Location, Retry-After, WWW-Authenticate, X-Request-Id"
	corsMaxAge        = "600"
)

// CheckOrigin refuses browser requests from other sites: a request whose
// Origin header is neither the server's own origin (its scheme, the Host
// it was sent to, and the port) nor one of allowed is answered 403 with a
// ForbiddenOriginError. Requests without an Origin (curl, the Go client,
// same-origin GETs) pass. For an allowed origin it adds
// Access-Control-Allow-Origin to every answer and answers CORS preflight
// requests (OPTIONS with Access-Control-Request-Method) itself, so it
// must sit outside BearerAuth: a preflight carries no token.
//
// Each allowed origin is scheme://host[:port] with scheme http or https,
// as a browser sends it; the default port may be left out. Forwarding
// headers (X-Forwarded-Host, ...) are not trusted: behind a proxy that
// rewrites Host, list the public origin.
func CheckOrigin(allowed []string) (func(http.Handler) http.Handler, error) {
	allow := make(map[string]bool, len(allowed))
	for _, o := range allowed {
		n, ok := normalOrigin(o)
		if !ok {
			return nil, fmt.Errorf("server: allowed origin %q: want scheme://host[:port] with scheme http or https, no path and no wildcard", o)
		}
		allow[n] = true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			origin := r.Header.Get("Origin")
			if origin == "" {
				next.ServeHTTP(w, r)
				return
			}
			n, ok := normalOrigin(origin)
			if ok && n == selfOrigin(r) {
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Add("Vary", "Origin")
			if !ok || !allow[n] {
				writeProblem(w, r, http.StatusForbidden, Problem{Error: string(svc.KindForbiddenOrigin),
					Detail: fmt.Sprintf("origin %q is not allowed (svc serve --allowed-origins)", truncate(origin, 100))})
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Add("Vary", "Access-Control-Request-Method")
				h.Add("Vary", "Access-Control-Request-Headers")
				h.Set("Access-Control-Allow-Methods", corsAllowMethods)
				h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
				h.Set("Access-Control-Max-Age", corsMaxAge)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
			next.ServeHTTP(w, r)
		})
	}, nil
}

// normalOrigin returns origin as lower-case scheme://host:port with the
// port always present, or false when it is not an http(s) origin ("null",
// a path, user info, a wildcard).
func normalOrigin(origin string) (string, bool) {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	return hostPort(scheme, u.Host)
}

// selfOrigin is the origin of the server as r reached it: http or https by
// the connection, and the Host header.
func selfOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	o, _ := hostPort(scheme, r.Host)
	return o
}

// hostPort joins scheme with host, lower-cased, and its port, the scheme's
// default when host has none.
func hostPort(scheme, host string) (string, bool) {
	if host == "" || strings.ContainsAny(host, "*/ ") {
		return "", false
	}
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = strings.Trim(host, "[]"), ""
	}
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	if h == "" {
		return "", false
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(h), port), true
}
