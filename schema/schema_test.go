package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
)

func TestCompileNoSchema(t *testing.T) {
	for _, raw := range []string{"", "  ", "null", " null\n"} {
		v, err := Compile(json.RawMessage(raw))
		if err != nil || v != nil {
			t.Errorf("Compile(%q) = %v, %v; want nil, nil", raw, v, err)
		}
		if err := v.Validate(json.RawMessage(`{"anything": [1, 2]}`)); err != nil {
			t.Errorf("nil Validator rejected a value: %v", err)
		}
		if v.Raw() != nil {
			t.Errorf("nil Validator Raw() = %s", v.Raw())
		}
	}
	if v, err := Compile(nil); err != nil || v != nil {
		t.Errorf("Compile(nil) = %v, %v", v, err)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "not valid JSON"},
		{"trailing data", `{} {}`, "not valid JSON"},
		{"number", `42`, "must be a JSON object or boolean"},
		{"array", `[]`, "must be a JSON object or boolean"},
		{"unknown type", `{"type":"strin"}`, `type "strin"`},
		{"unknown type in list", `{"properties":{"a":{"type":["string","nope"]}}}`, "/properties/a: type nope"},
		{"type not string", `{"type":5}`, "type"},
		{"bad subschema", `{"properties":{"a":5}}`, "invalid schema"},
		{"multipleOf zero", `{"multipleOf":0}`, "multipleOf must be a number greater than 0"},
		{"minimum string", `{"minimum":"1"}`, "minimum"},
		{"bad pattern", `{"pattern":"("}`, "pattern"},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, "invalid schema"},
		{"dangling pointer", `{"$ref":"#/$defs/missing"}`, "invalid schema"},
		{"unsupported draft", `{"$schema":"http://json-schema.org/draft-04/schema#"}`, "only draft 2020-12 and draft-07"},
		{"self ref", `{"$ref":"#"}`, "loop back"},
		{"ref cycle", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, "loop back"},
		{"cycle through not", `{"$defs":{"a":{"not":{"$ref":"#/$defs/a"}}}}`, "loop back"},
		{"anchor cycle", `{"$defs":{"a":{"$anchor":"x","anyOf":[{"$ref":"#x"}]}}}`, "loop back"},
		{"too branchy", branchy(20), "too complex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatalf("Compile succeeded: %s", v.Raw())
			}
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Errorf("error %v is not a SpecValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// branchy returns a schema whose allOfs double the work at each of n
// levels.
func branchy(n int) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{"d0":{"type":"integer"}`)
	for i := 1; i <= n; i++ {
		b.WriteString(`,"d` + itoa(i) + `":{"allOf":[{"$ref":"#/$defs/d` + itoa(i-1) + `"},{"$ref":"#/$defs/d` + itoa(i-1) + `"}]}`)
	}
	b.WriteString(`},"$ref":"#/$defs/d` + itoa(n) + `"}`)
	return b.String()
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestRecursiveSchemaThatDescends(t *testing.T) {
	// A tree refers to itself, but only through a property, so validation
	// ends with the value.
	tree := `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["name"]}`
	v, err := Compile(json.RawMessage(tree))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(json.RawMessage(`{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`)); err != nil {
		t.Errorf("valid tree rejected: %v", err)
	}
	err = v.Validate(json.RawMessage(`{"name":"a","children":[{"name":"b","children":[{}]}]}`))
	if err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("tree missing a nested name: err = %v", err)
	}
}

func TestValidate(t *testing.T) {
	const person = `{
		"$defs": {"age": {"type": "integer", "minimum": 0}},
		"type": "object",
		"properties": {
			"name": {"type": "string", "minLength": 1},
			"age": {"$ref": "#/$defs/age"},
			"tags": {"type": "array", "items": {"enum": ["a", "b"]}}
		},
		"required": ["name"],
		"additionalProperties": false
	}`
	v, err := Compile(json.RawMessage(person))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		value string
		want  string // "" for valid; else a fragment of the error
	}{
		{`{"name":"Al"}`, ""},
		{`{"name":"Al","age":3,"tags":["a","b"]}`, ""},
		{`{"name":"Al","age":3.0}`, ""},
		{`{}`, "required"},
		{`{"name":""}`, "minLength"},
		{`{"name":"Al","age":-1}`, "minimum"},
		{`{"name":"Al","age":1.5}`, "integer"},
		{`{"name":"Al","tags":["c"]}`, "enum"},
		{`{"name":"Al","x":1}`, "x"},
		{`[]`, "type"},
		{`"Al"`, "type"},
		{`{"name":`, "not valid JSON"},
		{``, "not valid JSON"},
	}
	for _, tt := range tests {
		err := v.Validate(json.RawMessage(tt.value))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Validate(%s) = %v; want nil", tt.value, err)
		case tt.want != "" && err == nil:
			t.Errorf("Validate(%s) = nil; want an error mentioning %q", tt.value, tt.want)
		case tt.want != "" && !strings.Contains(err.Error(), tt.want):
			t.Errorf("Validate(%s) = %q; want it to mention %q", tt.value, err, tt.want)
		case err != nil && errors.Is(err, svc.ErrRuntime):
			t.Errorf("Validate(%s) returned a kinded error %v; callers choose the kind", tt.value, err)
		}
	}
}

func TestValidateNamesLocation(t *testing.T) {
	v, err := Compile(json.RawMessage(`{"properties":{"a":{"type":"array","items":{"type":"integer"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = v.Validate(json.RawMessage(`{"a":[1,"x"]}`))
	if err == nil {
		t.Fatal("invalid value accepted")
	}
	for _, want := range []string{"/properties/a/items", "type"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "validating") {
		t.Errorf("error %q keeps the library's chain", err)
	}
}

func TestBooleanSchemas(t *testing.T) {
	yes, err := Compile(json.RawMessage(`true`))
	if err != nil {
		t.Fatal(err)
	}
	if err := yes.Validate(json.RawMessage(`[1,{"a":null}]`)); err != nil {
		t.Errorf("true schema rejected a value: %v", err)
	}
	no, err := Compile(json.RawMessage(`false`))
	if err != nil {
		t.Fatal(err)
	}
	if err := no.Validate(json.RawMessage(`1`)); err == nil {
		t.Error("false schema accepted a value")
	}
}

func TestDraft07(t *testing.T) {
	v, err := Compile(json.RawMessage(`{
		"$schema": "http://json-schema.org/draft-07/schema#",
		"definitions": {"n": {"$id": "#num", "type": "number"}},
		"type": "array", "items": [{"type": "string"}, {"$ref": "#num"}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(json.RawMessage(`["a", 1]`)); err != nil {
		t.Errorf("valid tuple rejected: %v", err)
	}
	if err := v.Validate(json.RawMessage(`["a", "b"]`)); err == nil {
		t.Error("invalid tuple accepted")
	}
}

func TestRaw(t *testing.T) {
	v, err := Compile(json.RawMessage("  {\"type\": \"string\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v.Raw()); got != `{"type": "string"}` {
		t.Errorf("Raw() = %q", got)
	}
}

func TestValidateConcurrently(t *testing.T) {
	v, err := Compile(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":50}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := range 100 {
		wg.Go(func() {
			err := v.Validate(json.RawMessage(`{"n":` + itoa(i) + `}`))
			if (err == nil) != (i <= 50) {
				errs[i] = errors.New("wrong verdict for " + itoa(i))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

type forArgs struct {
	City  string   `json:"city" jsonschema:"the city to look up"`
	Days  int      `json:"days,omitempty"`
	Units *string  `json:"units,omitempty"`
	Tags  []string `json:"tags"`
}

func TestFor(t *testing.T) {
	raw, err := For[forArgs]()
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Type       string                     `json:"type"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" {
		t.Errorf("type = %q", s.Type)
	}
	if strings.Join(s.Required, ",") != "city,tags" {
		t.Errorf("required = %v; want city and tags", s.Required)
	}
	if !strings.Contains(string(s.Properties["city"]), "the city to look up") {
		t.Errorf("city property %s lacks its description", s.Properties["city"])
	}
	v, err := Compile(raw)
	if err != nil {
		t.Fatalf("generated schema does not compile: %v", err)
	}
	if err := v.Validate(json.RawMessage(`{"city":"Oslo","tags":[],"days":2}`)); err != nil {
		t.Errorf("valid args rejected: %v", err)
	}
	if err := v.Validate(json.RawMessage(`{"city":"Oslo","tags":[],"extra":1}`)); err == nil {
		t.Error("unknown property accepted")
	}

	if _, err := For[func()](); err == nil {
		t.Error("For[func()] succeeded")
	}
}

func TestKeywordCaseFolding(t *testing.T) {
	// encoding/json, and so jsonschema-go, matches keywords without regard
	// to case; the cycle check must see them the same way.
	for _, s := range []string{
		`{"$REF":"#"}`,
		`{"$dynamicAnchor":"a","anyOf":[{"$dynaMicRef":"#a"}]}`,
		`{"$defs":{"a":{"ALLOF":[{"$ref":"#/$defs/a"}]}}}`,
	} {
		if _, err := Compile(json.RawMessage(s)); err == nil || !strings.Contains(err.Error(), "loop back") {
			t.Errorf("Compile(%s) = %v; want a cycle error", s, err)
		}
	}
	got, err := Example(json.RawMessage(`{"TYPE":"object","Required":["a"],"properties":{"a":{"Type":"integer","MINIMUM":3}}}`))
	if err != nil || string(got) != `{"a":3}` {
		t.Errorf("Example with odd-case keywords = %s, %v", got, err)
	}
}
