package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/openapi"
)

// everything is a backend with every optional interface the routes look
// for, so that the router mounts all of them. Nothing calls it.
type everything struct {
	svc.Backend
	svc.RunBackend
	svc.RunLister
	svc.BudgetKeeper
	svc.ToolCatalog
	svc.BatchBackend
}

// TestOpenAPICoversEveryRoute: the OpenAPI document lists exactly the
// routes of the standalone server with every option on, so a route added
// or removed without its documentation fails here.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	rt, err := NewRouter(everything{}, WithSSEEmitter(struct{ svc.EventSubscriber }{}))
	if err != nil {
		t.Fatal(err)
	}
	mountObservation(rt, everything{}, struct{ svc.EventReader }{}, nil)
	rt.Method(http.MethodGet, "/metrics", http.NotFoundHandler())

	var served []string
	err = chi.Walk(rt, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, r := range openapi.Routes {
		documented = append(documented, r.Method+" "+r.Path)
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, s := range served {
		if !slices.Contains(documented, s) {
			t.Errorf("%s is served but not in the OpenAPI document (http/openapi Routes)", s)
		}
	}
	for _, d := range documented {
		if !slices.Contains(served, d) {
			t.Errorf("%s is in the OpenAPI document but no server serves it", d)
		}
	}
}
