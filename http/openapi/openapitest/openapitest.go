// Package openapitest checks HTTP traffic against svc's OpenAPI document
// (package http/openapi, as http/server serves it) with a maintained validator
// (github.com/pb33f/libopenapi-validator), so the contract tests that
// drive the server through its clients also prove the document describes
// what the server answers.
package openapitest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/svc-dev/svc/http/server"
)

var (
	once sync.Once
	v    validator.Validator
	vErr error
	// mu serialises validations: the validator's caches are not documented
	// as safe for concurrent use.
	mu sync.Mutex
)

// Validator returns the validator of the document, built once.
func Validator() (validator.Validator, error) {
	once.Do(func() {
		var doc []byte
		if doc, vErr = server.OpenAPIDocument(); vErr != nil {
			return
		}
		var d libopenapi.Document
		if d, vErr = libopenapi.NewDocument(doc); vErr != nil {
			return
		}
		var errs []error
		v, errs = validator.NewValidator(d)
		if len(errs) > 0 {
			vErr = fmt.Errorf("openapitest: %v", errs)
		}
	})
	return v, vErr
}

// Checker validates the responses of a handler it wraps and reports what
// does not match the document to its test.
type Checker struct {
	t       testing.TB
	mu      sync.Mutex
	checked int
	done    bool
}

// Wrap returns h with every JSON response checked against the document:
// its status must be documented for the route and its body must match the
// schema. Event streams pass through unchecked (their frames are the
// RunEvent and RuntimeEvent schemas, which the JSON routes check). Failures
// are reported with t.Errorf; the test must outlive the server.
func Wrap(t testing.TB, h http.Handler) (http.Handler, *Checker) {
	t.Helper()
	if _, err := Validator(); err != nil {
		t.Fatal(err)
	}
	c := &Checker{t: t}
	t.Cleanup(func() {
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if !rec.keep {
			return
		}
		c.check(r, rec)
	}), c
}

// Checked is the number of responses validated so far.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

func (c *Checker) check(r *http.Request, rec *recorder) {
	val, _ := Validator()
	resp := &http.Response{
		StatusCode: rec.status,
		Header:     rec.Header().Clone(),
		Body:       io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Request:    r,
	}
	req := r.Clone(r.Context())
	req.Body = http.NoBody
	mu.Lock()
	ok, errs := val.ValidateHttpResponse(req, resp)
	mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.checked++
	if ok {
		return
	}
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    at %s: %s", f.FieldPath, f.Reason)
		}
	}
	c.t.Errorf("openapitest: %s %s answered %d, not as the OpenAPI document says:%s\n  body: %.600s",
		r.Method, r.URL.Path, rec.status, b.String(), rec.body.String())
}

// recorder passes a response through and keeps a copy of a JSON body.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	keep   bool
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.wrote = true
		r.status = status
		ct := r.Header().Get("Content-Type")
		r.keep = strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json") || status == http.StatusNoContent
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if r.keep {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}

// Flush, Hijack and Unwrap keep streaming and http.ResponseController
// working through the recorder.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
