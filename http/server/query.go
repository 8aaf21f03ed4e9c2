package server

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	svc "github.com/svc-dev/svc"
)

// queryOf returns r's query for a route that takes the parameters known
// (none when known is empty), each at most once: see parseQuery.
func queryOf(r *http.Request, known ...string) (url.Values, error) {
	return parseQuery(r.URL.RawQuery, known)
}

// parseQuery is the one reading of a query string every route that takes
// parameters goes through. A parameter outside known is a 400 naming it,
// so that a typo (?group-by=) is an error rather than silently ignored;
// so is one given more than once unless it is listed in repeatable
// (?max_concurrency=1&max_concurrency=500 would otherwise be taken as
// whichever one the handler happened to read).
func parseQuery(raw string, known []string, repeatable ...string) (url.Values, error) {
	if raw == "" {
		return url.Values{}, nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, svc.Errorf(svc.KindSpecValidation, "query string: %v", err)
	}
	for k, v := range q {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, svc.Errorf(svc.KindSpecValidation, "query parameter %q: this route takes no query parameters", truncate(k, 40))
			}
			return nil, svc.Errorf(svc.KindSpecValidation, "query parameter %q is not known here (known: %s)", truncate(k, 40), strings.Join(known, ", "))
		}
		if len(v) > 1 && !slices.Contains(repeatable, k) {
			return nil, svc.Errorf(svc.KindSpecValidation, "query parameter %q is given %d times; give it once", k, len(v))
		}
	}
	return q, nil
}
