package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
)

// routedPath is the path chi routes r on: the escaped path when the
// request has one that differs from the default encoding (r.URL.RawPath),
// else the decoded one. Decisions about a request (which routes need no
// token) are made on this path, so that they cannot disagree with the
// route that serves it: a path decoded and cleaned for the decision
// ("/agents/..%2F..%2Fdashboard%2Fx/schema" is "/dashboard/x/schema") is
// not the path that was routed (an agent's schema).
func routedPath(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath != "" {
		return rctx.RoutePath
	}
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// pathTrick says what is wrong with p, a routed path, or "" when nothing
// is: a dot segment ("." or "..", written plainly or escaped), or a
// segment holding an escaped slash or a backslash. No route of the router
// has such a segment, and each is a way to make a path read differently
// by whoever cleans or decodes it (a proxy, a file server, an auth check)
// than by the router. escaped says whether p is an escaped path (the
// segments are unescaped before the check) or a decoded one.
func pathTrick(p string, escaped bool) string {
	// The common path has none of the bytes a trick needs.
	if !strings.Contains(p, "/.") && strings.IndexByte(p, '%') < 0 && strings.IndexByte(p, '\\') < 0 {
		return ""
	}
	for seg := range strings.SplitSeq(p, "/") {
		s := seg
		if escaped && strings.IndexByte(seg, '%') >= 0 {
			d, err := url.PathUnescape(seg)
			if err != nil {
				return "an invalid escape in segment " + quoteSegment(seg)
			}
			s = d
		}
		switch {
		case s == "." || s == "..":
			return "a dot segment (" + quoteSegment(seg) + ")"
		case strings.IndexByte(s, '/') >= 0:
			return "an escaped slash in segment " + quoteSegment(seg)
		case strings.IndexByte(s, '\\') >= 0:
			return "a backslash in segment " + quoteSegment(seg)
		}
	}
	return ""
}

func quoteSegment(s string) string { return `"` + truncate(s, 60) + `"` }

// checkPath is the error CheckPath answers r with, or nil.
func checkPath(r *http.Request) error {
	// chi routes on the escaped path whenever the request has one (a
	// mounted router's RoutePath is cut from it too).
	if why := pathTrick(routedPath(r), r.URL.RawPath != ""); why != "" {
		return svc.Errorf(svc.KindSpecValidation, "path %s has %s: no route takes one", quoteSegment(r.URL.EscapedPath()), why)
	}
	return nil
}

// CheckPath refuses a request whose path has a dot segment ("/./",
// "/../", plain or escaped as %2e), an escaped slash (%2F) or a backslash
// (plain or %5C) with a 400 SpecValidationError problem, before anything
// else looks at the path. No route has such a path, and each makes a path
// read one way by a check that decodes or cleans it and another by the
// router, which routes on the escaped path: put CheckPath outside any
// authentication that lets some paths through without credentials.
// NewStandalone does.
func CheckPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkPath(r); err != nil {
			WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// pathParam returns the path parameter key of r, unescaped (chi routes on
// the escaped path when the request has one, and then hands out escaped
// segments), and refuses a value no name or id can be: empty (a "//" in
// the path), a dot segment, or one holding a slash or a backslash. what
// ("agent name", "run id") names it in the error.
func pathParam(r *http.Request, key, what string) (string, error) {
	v := chi.URLParam(r, key)
	if r.URL.RawPath != "" {
		d, err := url.PathUnescape(v)
		if err != nil {
			return "", svc.Errorf(svc.KindSpecValidation, "%s %q in the path: %v", what, truncate(v, 60), err)
		}
		v = d
	}
	switch {
	case v == "":
		return "", svc.Errorf(svc.KindSpecValidation, "%s in the path is empty", what)
	case v == "." || v == "..":
		return "", svc.Errorf(svc.KindSpecValidation, "%s %q in the path is a dot segment", what, v)
	case strings.ContainsAny(v, `/\`):
		return "", svc.Errorf(svc.KindSpecValidation, "%s %q in the path holds a slash or a backslash", what, truncate(v, 60))
	}
	return v, nil
}
