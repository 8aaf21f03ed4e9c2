package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/svc-dev/svc"
)

// maxExampleDepth bounds how deeply Example nests values; a schema that
// requires deeper values (a recursive type with a required child) has no
// finite example.
const maxExampleDepth = 32

// maxExampleCount bounds the lengths, item and property counts Example
// builds, so a schema asking for a billion items costs nothing.
const maxExampleCount = 4096

// formatExamples are values of the string formats a tool schema is likely
// to use.
var formatExamples = map[string]string{
	"date-time": "1970-01-01T00:00:00Z",
	"date":      "1970-01-01",
	"time":      "00:00:00Z",
	"duration":  "PT0S",
	"email":     "user@example.com",
	"hostname":  "example.com",
	"ipv4":      "127.0.0.1",
	"ipv6":      "::1",
	"uri":       "https://example.com/",
	"url":       "https://example.com/",
	"uuid":      "00000000-0000-0000-0000-000000000000",
}

// Example returns a small, deterministic value that meets the schema: the
// test model uses it as tool arguments. Objects get their required
// properties, strings and numbers their lower bounds, arrays their minimum
// length, booleans false; enum and const give their (first) value, oneOf
// and anyOf their first branch, and allOf is merged. An empty schema (or
// none) gives {}. When the schema is too intricate for this (a pattern, say),
// or admits no value, Example returns a SpecValidationError rather than a
// value that does not validate.
func Example(raw json.RawMessage) (json.RawMessage, error) {
	v, err := Compile(raw)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return json.RawMessage("{}"), nil
	}
	g := generator{doc: v.doc}
	value, err := g.value(v.doc.root, 0, true)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "cannot build an example value")
	}
	if err := v.validate(value); err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "cannot build an example value")
	}
	out, err := json.Marshal(value)
	if err != nil {
		return nil, svc.Wrap(svc.KindSpecValidation, err, "cannot build an example value")
	}
	return out, nil
}

type generator struct {
	doc *document
	// steps bounds the in-place merging work, which Compile has already
	// bounded per value, across the whole example.
	steps int
}

// value builds an example of schema s at nesting depth depth.
func (g *generator) value(s any, depth int, root bool) (any, error) {
	if depth > maxExampleDepth {
		return nil, fmt.Errorf("the schema requires values nested more than %d deep", maxExampleDepth)
	}
	m, err := g.flatten(s)
	if err != nil {
		return nil, err
	}
	// Choose the first branch of each oneOf/anyOf, merged with the rest of
	// the schema so that the branch inherits its constraints. A branch may
	// bring its own oneOf, so repeat.
	for {
		kw := ""
		if _, ok := m["oneOf"]; ok {
			kw = "oneOf"
		} else if _, ok := m["anyOf"]; ok {
			kw = "anyOf"
		}
		if kw == "" {
			break
		}
		branches, _ := m[kw].([]any)
		rest := maps.Clone(m)
		delete(rest, kw)
		if len(branches) == 0 {
			m = rest
			continue
		}
		b, err := g.flatten(branches[0])
		if err != nil {
			return nil, err
		}
		if m, err = g.merge(rest, b); err != nil {
			return nil, err
		}
	}
	if c, ok := m["const"]; ok {
		return c, nil
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[0], nil
	}
	switch typeOf(m, root) {
	case "null":
		return nil, nil
	case "boolean":
		return false, nil
	case "string":
		return stringExample(m), nil
	case "integer":
		return numberExample(m, true), nil
	case "number":
		return numberExample(m, false), nil
	case "array":
		return g.arrayExample(m, depth)
	default:
		return g.objectExample(m, depth)
	}
}

func (g *generator) objectExample(m map[string]any, depth int) (any, error) {
	out := map[string]any{}
	props, _ := m["properties"].(map[string]any)
	add := func(name string) error {
		var sub any = true
		if p, ok := props[name]; ok {
			sub = p
		} else if ap, ok := m["additionalProperties"]; ok {
			sub = ap
		}
		v, err := g.value(sub, depth+1, false)
		if err != nil {
			return fmt.Errorf("property %q: %w", name, err)
		}
		out[name] = v
		return nil
	}
	required, _ := m["required"].([]any)
	for _, r := range required {
		if name, ok := r.(string); ok {
			if _, done := out[name]; !done {
				if err := add(name); err != nil {
					return nil, err
				}
			}
		}
	}
	// minProperties: first the declared optional properties, then made-up
	// names for additionalProperties.
	want := intKeyword(m, "minProperties")
	for _, name := range sortedKeys(props) {
		if len(out) >= want {
			break
		}
		if _, done := out[name]; !done {
			if err := add(name); err != nil {
				return nil, err
			}
		}
	}
	for i := 1; len(out) < want; i++ {
		name := fmt.Sprintf("p%d", i)
		if _, done := out[name]; !done {
			if err := add(name); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func (g *generator) arrayExample(m map[string]any, depth int) (any, error) {
	out := []any{}
	prefix, _ := m["prefixItems"].([]any)
	if prefix == nil {
		prefix, _ = m["items"].([]any) // draft-07 tuple form
	}
	var items any = true
	if it, ok := m["items"]; ok && isSchema(it) {
		items = it
	} else if ai, ok := m["additionalItems"]; ok && isSchema(ai) {
		items = ai
	}
	n := intKeyword(m, "minItems")
	contains, hasContains := m["contains"]
	if hasContains {
		need := 1
		if _, ok := m["minContains"]; ok {
			need = intKeyword(m, "minContains")
		}
		if need > n {
			n = need
		}
	}
	for i := 0; i < n; i++ {
		sub := items
		switch {
		case i < len(prefix):
			sub = prefix[i]
		case hasContains && !hasKey(m, "items"):
			sub = contains
		}
		v, err := g.value(sub, depth+1, false)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func stringExample(m map[string]any) string {
	if f, ok := m["format"].(string); ok {
		if s, ok := formatExamples[f]; ok {
			return s
		}
	}
	return strings.Repeat("a", intKeyword(m, "minLength"))
}

// numberExample returns the least non-negative number meeting the bounds,
// or the greatest one when the bounds are all negative.
func numberExample(m map[string]any, integer bool) float64 {
	lo, hasLo := floatKeyword(m, "minimum")
	exLo, hasExLo := floatKeyword(m, "exclusiveMinimum")
	hi, hasHi := floatKeyword(m, "maximum")
	exHi, hasExHi := floatKeyword(m, "exclusiveMaximum")
	step, hasStep := floatKeyword(m, "multipleOf")
	if integer {
		if hasStep {
			// Integers that are multiples of step are multiples of the
			// least common multiple of step and 1, when step is rational;
			// for the usual integral step that is step itself.
			if step != math.Trunc(step) {
				step = 1
			}
		} else {
			step, hasStep = 1, true
		}
	}
	up := func(v float64, strict bool) float64 {
		if hasStep {
			r := math.Ceil(v/step) * step
			if strict && r <= v {
				r += step
			}
			return r
		}
		if strict {
			if hasHi && hi > v {
				return v + math.Min(1, (hi-v)/2)
			}
			if hasExHi && exHi > v {
				return v + math.Min(1, (exHi-v)/2)
			}
			return v + 1
		}
		return v
	}
	down := func(v float64, strict bool) float64 {
		if hasStep {
			r := math.Floor(v/step) * step
			if strict && r >= v {
				r -= step
			}
			return r
		}
		if strict {
			return v - 1
		}
		return v
	}
	v := 0.0 // a multiple of every step
	if hasLo && lo > v {
		v = up(lo, false)
	}
	if hasExLo && exLo >= v {
		v = up(exLo, true)
	}
	if hasHi && hi < v {
		v = down(hi, false)
	}
	if hasExHi && exHi <= v {
		v = down(exHi, true)
	}
	return v
}

// typeOf picks the JSON type to build: the first non-null of "type", or
// one implied by the keywords present. An unconstrained root is an object,
// which suits tool arguments.
func typeOf(m map[string]any, root bool) string {
	switch t := m["type"].(type) {
	case string:
		return t
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && s != "null" {
				return s
			}
		}
		if len(t) > 0 {
			return "null"
		}
	}
	has := func(kws ...string) bool {
		return slices.ContainsFunc(kws, func(k string) bool { return hasKey(m, k) })
	}
	switch {
	case has("properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties", "propertyNames"):
		return "object"
	case has("items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems"):
		return "array"
	case has("minLength", "maxLength", "pattern", "format"):
		return "string"
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
		return "number"
	}
	if root {
		return "object"
	}
	return "null"
}

// flatten returns schema s as one object with its $ref and allOf merged in,
// a fresh map the caller may change.
func (g *generator) flatten(s any) (map[string]any, error) {
	g.steps++
	if g.steps > maxInPlace {
		return nil, fmt.Errorf("the schema is too complex")
	}
	switch s := s.(type) {
	case bool:
		if !s {
			return nil, errNoValue
		}
		return map[string]any{}, nil
	case map[string]any:
		out := maps.Clone(s)
		delete(out, "$ref")
		delete(out, "$dynamicRef")
		delete(out, "allOf")
		var parts []any
		if t := g.doc.target(s); t != nil {
			parts = append(parts, t)
		}
		if all, ok := s["allOf"].([]any); ok {
			parts = append(parts, all...)
		}
		for _, p := range parts {
			f, err := g.flatten(p)
			if err != nil {
				return nil, err
			}
			if out, err = g.merge(out, f); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("not a schema: %v", s)
}

// merge combines two flattened schemas into one that a value must meet
// both of, as far as Example cares: a has precedence where they disagree.
func (g *generator) merge(a, b map[string]any) (map[string]any, error) {
	out := maps.Clone(a)
	for k, bv := range b {
		av, ok := out[k]
		if !ok {
			out[k] = bv
			continue
		}
		switch k {
		case "properties", "patternProperties":
			am, _ := av.(map[string]any)
			bm, _ := bv.(map[string]any)
			merged := maps.Clone(am)
			if merged == nil {
				merged = map[string]any{}
			}
			for name, s := range bm {
				if prev, ok := merged[name]; ok {
					merged[name] = map[string]any{"allOf": []any{prev, s}}
				} else {
					merged[name] = s
				}
			}
			out[k] = merged
		case "required":
			aa, _ := av.([]any)
			ba, _ := bv.([]any)
			merged := slices.Clone(aa)
			for _, r := range ba {
				if !slices.Contains(merged, r) {
					merged = append(merged, r)
				}
			}
			out[k] = merged
		case "type":
			out[k] = intersectTypes(av, bv)
		case "minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains":
			if f, ok := bv.(float64); ok {
				if af, ok := av.(float64); !ok || f > af {
					out[k] = f
				}
			}
		case "maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains":
			if f, ok := bv.(float64); ok {
				if af, ok := av.(float64); !ok || f < af {
					out[k] = f
				}
			}
		case "enum":
			aa, _ := av.([]any)
			ba, _ := bv.([]any)
			var both []any
			for _, e := range aa {
				if slices.ContainsFunc(ba, func(x any) bool { return reflect.DeepEqual(x, e) }) {
					both = append(both, e)
				}
			}
			if len(both) > 0 {
				out[k] = both
			}
		case "items", "additionalProperties", "additionalItems", "contains", "propertyNames", "not":
			out[k] = map[string]any{"allOf": []any{av, bv}}
		}
		// Anything else: a wins; the final validation catches a conflict.
	}
	return out, nil
}

func intersectTypes(a, b any) any {
	list := func(v any) []string {
		switch t := v.(type) {
		case string:
			return []string{t}
		case []any:
			var out []string
			for _, e := range t {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		return nil
	}
	as, bs := list(a), list(b)
	var both []any
	for _, t := range as {
		switch {
		case slices.Contains(bs, t):
			both = append(both, t)
		case t == "number" && slices.Contains(bs, "integer"), t == "integer" && slices.Contains(bs, "number"):
			both = append(both, "integer")
		}
	}
	if len(both) == 0 {
		return a
	}
	return both
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// intKeyword reads a count keyword (minLength, minItems...). Counts past
// maxExampleCount are not worth building and are treated as zero, so the
// final validation reports the schema as too demanding.
func intKeyword(m map[string]any, k string) int {
	f, _ := m[k].(float64)
	if f < 0 || f > maxExampleCount {
		return 0
	}
	return int(f)
}

func floatKeyword(m map[string]any, k string) (float64, bool) {
	f, ok := m[k].(float64)
	return f, ok
}
