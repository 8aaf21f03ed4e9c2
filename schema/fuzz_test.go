package schema

import (
	"encoding/json"
	"testing"
)

// FuzzCompileValidate feeds outside schemas and values through Compile,
// Validate and Example: none may panic or recurse without end, and an
// example, when there is one, must validate.
func FuzzCompileValidate(f *testing.F) {
	seeds := [][2]string{
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, `{"a":"x"}`},
		{`{"$defs":{"n":{"type":"integer"}},"items":{"$ref":"#/$defs/n"}}`, `[1,2,"x"]`},
		{`{"$ref":"#"}`, `1`},
		{`{"oneOf":[{"minimum":1},{"multipleOf":2}]}`, `2`},
		{`{"$dynamicAnchor":"a","anyOf":[{"$dynamicRef":"#a"}]}`, `null`},
		{`{"properties":{"c":{"$ref":"#"}},"required":["c"]}`, `{"c":{}}`},
		{`{"$id":"https://x/y","$defs":{"a":{"$id":"z","$anchor":"q"}},"$ref":"z#q"}`, `{}`},
		{`{"pattern":"^a+$","minLength":2}`, `"aa"`},
		{`true`, `[]`},
		{`{"type":["string","null"],"enum":[null,"a"]}`, `"b"`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, schema, value string) {
		v, err := Compile(json.RawMessage(schema))
		if err != nil {
			return
		}
		_ = v.Validate(json.RawMessage(value))
		ex, err := Example(json.RawMessage(schema))
		if err != nil {
			return
		}
		if err := v.Validate(ex); err != nil {
			t.Fatalf("Example(%s) = %s, which does not validate: %v", schema, ex, err)
		}
	})
}
