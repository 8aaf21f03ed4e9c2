package schema

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/svc-dev/svc"
)

func TestExample(t *testing.T) {
	tests := []struct {
		name, schema string
		want         string // "" to check only that the example validates
	}{
		{"no schema", ``, `{}`},
		{"empty", `{}`, `{}`},
		{"true", `true`, `{}`},
		{"object", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]}`, `{"a":""}`},
		{"nested required", `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"boolean"},"c":{"type":"null"}},"required":["b","c"]}},"required":["a"]}`, `{"a":{"b":false,"c":null}}`},
		{"required without properties", `{"type":"object","required":["x"]}`, `{"x":null}`},
		{"required from additionalProperties", `{"type":"object","required":["x"],"additionalProperties":{"type":"number"}}`, `{"x":0}`},
		{"minProperties", `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"string"}},"minProperties":1}`, `{"a":""}`},
		{"minProperties beyond declared", `{"type":"object","minProperties":2,"additionalProperties":{"type":"integer"}}`, `{"p1":0,"p2":0}`},
		{"string enum", `{"type":"string","enum":["red","green"]}`, `"red"`},
		{"const", `{"const":{"k":[1,2]}}`, `{"k":[1,2]}`},
		{"minLength", `{"type":"string","minLength":3}`, `"aaa"`},
		{"date-time", `{"type":"string","format":"date-time"}`, `"1970-01-01T00:00:00Z"`},
		{"email", `{"type":"string","format":"email"}`, `"user@example.com"`},
		{"integer minimum", `{"type":"integer","minimum":5}`, `5`},
		{"integer exclusiveMinimum", `{"type":"integer","exclusiveMinimum":5}`, `6`},
		{"number exclusiveMinimum bounded", `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":0.5}`, `0.25`},
		{"multipleOf above minimum", `{"type":"integer","minimum":7,"multipleOf":5}`, `10`},
		{"multipleOf exclusive", `{"type":"number","exclusiveMinimum":10,"multipleOf":2.5}`, `12.5`},
		{"negative range", `{"type":"integer","maximum":-3}`, `-3`},
		{"negative exclusive", `{"type":"integer","exclusiveMaximum":-3}`, `-4`},
		{"fractional minimum integer", `{"type":"integer","minimum":1.5}`, `2`},
		{"array minItems", `{"type":"array","items":{"type":"integer","minimum":1},"minItems":2}`, `[1,1]`},
		{"array empty", `{"type":"array","items":{"type":"string"}}`, `[]`},
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"minItems":2}`, `["",false]`},
		{"contains", `{"type":"array","contains":{"const":"x"}}`, `["x"]`},
		{"boolean", `{"type":"boolean"}`, `false`},
		{"null", `{"type":"null"}`, `null`},
		{"type list", `{"type":["null","integer"]}`, `0`},
		{"type list only null", `{"type":["null"]}`, `null`},
		{"oneOf first branch", `{"oneOf":[{"type":"string","minLength":2},{"type":"integer"}]}`, `"aa"`},
		{"anyOf inherits", `{"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"required":["a"]},{"required":["b"]}]}`, `{"a":""}`},
		{"allOf merged", `{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}`, `{"a":0,"b":""}`},
		{"allOf bounds", `{"allOf":[{"type":"integer","minimum":3},{"minimum":8}]}`, `8`},
		{"allOf same property", `{"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"a":{"minimum":4}}}]}`, `{"a":4}`},
		{"ref", `{"$defs":{"loc":{"type":"object","properties":{"lat":{"type":"number"}},"required":["lat"]}},"type":"object","properties":{"at":{"$ref":"#/$defs/loc"}},"required":["at"]}`, `{"at":{"lat":0}}`},
		{"ref with siblings", `{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","minLength":2}`, `"aa"`},
		{"ref by anchor", `{"$defs":{"s":{"$anchor":"str","type":"string","const":"hi"}},"$ref":"#str"}`, `"hi"`},
		{"ref to nested id", `{"$defs":{"x":{"$id":"https://example.com/x","type":"integer","minimum":2}},"$ref":"https://example.com/x"}`, `2`},
		{"recursive optional", `{"type":"object","properties":{"child":{"$ref":"#"},"n":{"type":"integer"}},"required":["n"]}`, `{"n":0}`},
		{"untyped string hints", `{"minLength":1}`, `"a"`},
		{"untyped number hints", `{"minimum":2}`, `2`},
		{"draft-07 tuple", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"integer"}],"minItems":1}`, `[0]`},
		{"go type", string(mustFor[struct {
			Name string `json:"name"`
			When string `json:"when,omitempty"`
			N    *int   `json:"n"`
		}](t)), `{"n":0,"name":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Example(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatalf("Example: %v", err)
			}
			if tt.want != "" && string(got) != tt.want {
				t.Errorf("Example = %s; want %s", got, tt.want)
			}
			v, err := Compile(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Validate(got); err != nil {
				t.Errorf("example %s does not validate: %v", got, err)
			}
			again, err := Example(json.RawMessage(tt.schema))
			if err != nil || string(again) != string(got) {
				t.Errorf("second Example = %s, %v; want the same %s", again, err, got)
			}
		})
	}
}

func TestExampleErrors(t *testing.T) {
	tests := []struct{ name, schema string }{
		{"false", `false`},
		{"not anything", `{"not":{}}`},
		{"false property", `{"type":"object","properties":{"a":false},"required":["a"]}`},
		{"infinitely nested", `{"type":"object","properties":{"child":{"$ref":"#"}},"required":["child"]}`},
		{"pattern", `{"type":"string","pattern":"^[0-9]{3}$"}`},
		{"contradiction", `{"allOf":[{"type":"string"},{"type":"integer"}]}`},
		{"huge minItems", `{"type":"array","minItems":1000000000}`},
		{"invalid schema", `{"type":"strin"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Example(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatalf("Example = %s; want an error", got)
			}
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Errorf("error %v is not a SpecValidationError", err)
			}
		})
	}
}

func mustFor[T any](t *testing.T) json.RawMessage {
	t.Helper()
	raw, err := For[T]()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
