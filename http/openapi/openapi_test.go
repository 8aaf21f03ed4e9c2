package openapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/http/openapi/openapitest"
	"github.com/svc-dev/svc/http/server"
)

var update = flag.Bool("update", false, "rewrite docs/openapi.json from the code")

const repoCopy = "../../docs/openapi.json"

// TestDocumentIsValidOpenAPI: the document is OpenAPI 3.1 that a
// maintained validator accepts whole (schemas, $refs, responses).
func TestDocumentIsValidOpenAPI(t *testing.T) {
	doc, err := server.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.GetVersion(); v != "3.1.0" {
		t.Errorf("version %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  at %s: %s", f.FieldPath, f.Reason)
			}
		}
	}
}

// TestRepositoryCopy: docs/openapi.json is the document the code builds;
// `go test ./http/openapi -update` rewrites it.
func TestRepositoryCopy(t *testing.T) {
	doc, err := server.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(repoCopy, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(repoCopy)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, doc) {
		t.Errorf("docs/openapi.json is stale: run go test ./http/openapi -update (then make ts-types for the TypeScript client)")
	}
}

// TestEveryEventTypeHasItsPayload: RuntimeEvent has one variant per event
// type, requiring exactly that type's payload keys.
func TestEveryEventTypeHasItsPayload(t *testing.T) {
	doc, err := server.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas map[string]struct {
				OneOf []struct {
					Properties struct {
						EventType struct {
							Const string `json:"const"`
						} `json:"event_type"`
						Payload struct {
							Required   []string                   `json:"required"`
							Properties map[string]json.RawMessage `json:"properties"`
						} `json:"payload"`
					} `json:"properties"`
				} `json:"oneOf"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	variants := d.Components.Schemas["RuntimeEvent"].OneOf
	if len(variants) != len(svc.EventTypes) {
		t.Fatalf("%d variants, want one per event type (%d)", len(variants), len(svc.EventTypes))
	}
	for _, v := range variants {
		et := svc.EventType(v.Properties.EventType.Const)
		want := svc.PayloadKeys[et]
		if !slices.Equal(slices.Sorted(slices.Values(v.Properties.Payload.Required)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: required %v, want %v", et, v.Properties.Payload.Required, want)
		}
		if len(v.Properties.Payload.Properties) != len(want)+len(svc.OptionalPayloadKeys[et]) {
			t.Errorf("%s: %d payload properties", et, len(v.Properties.Payload.Properties))
		}
	}
}

// recordingTB catches what a Checker reports.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckerCatchesDrift: a response that does not match the document
// (a wrong type, a missing field, an undocumented key) is reported, one
// that matches is not.
func TestCheckerCatchesDrift(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		status           int
		bad              string // "" when the response is right
	}{
		{"agents", "/agents", `["echo"]`, 200, ""},
		{"agents wrong type", "/agents", `[1]`, 200, "/agents"},
		{"status", "/runs/r1/status", `{"run_id":"r1","state":"running","progress":null}`, 200, ""},
		{"status missing state", "/runs/r1/status", `{"run_id":"r1","progress":null}`, 200, "state"},
		{"status extra key", "/runs/r1/status", `{"run_id":"r1","state":"running","progress":null,"extra":1}`, 200, "extra"},
		{"problem", "/agents/x/schema", `{"type":"about:blank","title":"Not Found","status":404,"detail":"d","error":"RegistryError","message":"d","request_id":"r"}`, 404, ""},
		{"problem without error", "/agents/x/schema", `{"type":"about:blank","title":"Not Found","status":404,"detail":"d","message":"d","request_id":"r"}`, 404, "error"},
		{"problem of no kind", "/agents/x/schema", `{"type":"about:blank","title":"Not Found","status":404,"detail":"d","error":"NoSuchError","message":"d","request_id":"r"}`, 404, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			h, c := openapitest.Wrap(rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ct := "application/json"
				if tc.status >= 400 {
					ct = "application/problem+json"
				}
				w.Header().Set("Content-Type", ct)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", tc.path, nil))
			if c.Checked() != 1 {
				t.Fatalf("checked %d responses, want 1", c.Checked())
			}
			switch {
			case tc.bad == "" && len(rec.errs) > 0:
				t.Errorf("a right response was reported: %v", rec.errs)
			case tc.bad != "" && len(rec.errs) == 0:
				t.Errorf("a wrong response (%s) was not reported", tc.body)
			case tc.bad != "" && !strings.Contains(strings.Join(rec.errs, "\n"), tc.bad):
				t.Errorf("report %v does not name %q", rec.errs, tc.bad)
			}
		})
	}
}

// TestEveryErrorKindHasItsStatus: the problem body lists every error kind,
// and the document gives each the status the server answers it with.
func TestEveryErrorKindHasItsStatus(t *testing.T) {
	doc, err := server.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Statuses map[string]int `json:"x-svc-error-statuses"`
			Schemas  map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	enum := d.Components.Schemas["Problem"].Properties["error"].Enum
	for _, k := range svc.Kinds {
		if !slices.Contains(enum, string(k)) {
			t.Errorf("Problem.error does not list %s", k)
		}
		want := server.StatusOf(&svc.Error{Kind: k})
		if got := d.Components.Statuses[string(k)]; got != want {
			t.Errorf("x-svc-error-statuses[%s] = %d, the server answers %d", k, got, want)
		}
	}
	if d.Components.Statuses["SpecValidationError"] != 400 || d.Components.Statuses["RegistryError"] != 404 {
		t.Errorf("statuses %v", d.Components.Statuses)
	}
}

// The document's Problem is svc.Problem, which the server writes: every
// member of the Go type is a property (required unless omitempty), and
// nothing else is.
func TestProblemSchemaIsTheGoType(t *testing.T) {
	doc, err := server.OpenAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	p := d.Components.Schemas["Problem"]
	var props, required []string
	for f := range reflect.TypeFor[svc.Problem]().Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		props = append(props, name)
		if opts != "omitempty" {
			required = append(required, name)
		}
	}
	slices.Sort(props)
	slices.Sort(required)
	if got := slices.Sorted(maps.Keys(p.Properties)); !slices.Equal(got, props) {
		t.Errorf("Problem's properties %v, svc.Problem's members %v", got, props)
	}
	if got := slices.Sorted(slices.Values(p.Required)); !slices.Equal(got, required) {
		t.Errorf("Problem's required %v, svc.Problem's members without omitempty %v", got, required)
	}
}
