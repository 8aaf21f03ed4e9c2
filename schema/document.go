package schema

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
)

// maxInPlace bounds how many subschemas one value may be checked against
// without descending into it (through allOf, anyOf, oneOf, $ref and the
// like). jsonschema-go follows every branch, so a schema of nested allOfs
// over shared $refs costs exponential time in its own size; far below this
// bound a real schema is already unreadable.
const maxInPlace = 50_000

// document indexes a decoded schema by JSON Pointer so that references can
// be followed outside jsonschema-go, whose resolution is private: Compile
// needs them to reject reference cycles and Example to follow them.
type document struct {
	root any
	// nodes maps the JSON Pointer of every subschema to its decoded value
	// (a map[string]any or a bool); the root is "".
	nodes map[string]any
	// resources maps a base URI (without fragment) to the pointer of the
	// schema whose $id established it; the root's base is "".
	resources map[string]string
	// anchors maps a base URI and an anchor name to the pointer of the
	// schema carrying the $anchor (or $dynamicAnchor).
	anchors map[string]map[string]string
	// dynamic maps a $dynamicAnchor name to every schema carrying it.
	dynamic map[string][]string
	// pending are the references seen while walking, resolved later.
	pending []reference
	// targets maps the identity of a schema object holding a $ref (or
	// $dynamicRef) to the schema it refers to.
	targets map[uintptr]any
	// inPlace lists, per schema, the schemas the same value is checked
	// against: the graph whose cycles would recurse forever.
	inPlace map[string][]string
}

type reference struct {
	from    string // pointer of the schema holding the reference
	base    *url.URL
	ref     string
	dynamic bool
	object  map[string]any
}

var validTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// Keywords whose value is one subschema, an array of them, or an object of
// them. Those marked inPlace apply to the value itself rather than to a
// part of it.
var (
	singleKeywords = map[string]bool{
		"additionalProperties": false, "propertyNames": false, "items": false,
		"contains": false, "unevaluatedItems": false, "unevaluatedProperties": false,
		"additionalItems": false, "contentSchema": false,
		"not": true, "if": true, "then": true, "else": true,
	}
	arrayKeywords = map[string]bool{
		"allOf": true, "anyOf": true, "oneOf": true,
		"prefixItems": false, "items": false,
	}
	mapKeywords = map[string]bool{
		"properties": false, "patternProperties": false, "$defs": false, "definitions": false,
		"dependentSchemas": true, "dependencies": true,
	}
)

// index walks a decoded schema, checking what jsonschema-go does not (type
// names, multipleOf) and recording every subschema, base URI and anchor.
func index(tree any) (*document, error) {
	d := &document{
		root:      tree,
		nodes:     map[string]any{},
		resources: map[string]string{},
		anchors:   map[string]map[string]string{},
		dynamic:   map[string][]string{},
		targets:   map[uintptr]any{},
		inPlace:   map[string][]string{},
	}
	d.resources[""] = ""
	if err := d.walk(tree, "", &url.URL{}); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *document) walk(v any, ptr string, base *url.URL) error {
	d.nodes[ptr] = v
	m, ok := v.(map[string]any)
	if !ok {
		if _, ok := v.(bool); ok {
			return nil
		}
		return fmt.Errorf("%s: a schema must be an object or a boolean, not %s", where(ptr), jsonKind(v))
	}
	if id, ok := m["$id"].(string); ok {
		u, err := url.Parse(id)
		if err != nil {
			return fmt.Errorf("%s: $id %q: %v", where(ptr), id, err)
		}
		if u.Scheme == "" && u.Host == "" && u.Path == "" && u.Fragment != "" {
			// draft-07 spelling of an anchor.
			d.addAnchor(base, u.Fragment, ptr)
		} else {
			base = base.ResolveReference(u)
			base.Fragment, base.RawFragment = "", ""
			d.resources[base.String()] = ptr
		}
	}
	if a, ok := m["$anchor"].(string); ok {
		d.addAnchor(base, a, ptr)
	}
	if a, ok := m["$dynamicAnchor"].(string); ok {
		d.addAnchor(base, a, ptr)
		d.dynamic[a] = append(d.dynamic[a], ptr)
	}
	if err := checkKeywords(m, ptr); err != nil {
		return err
	}
	for _, kw := range []string{"$ref", "$dynamicRef"} {
		if ref, ok := m[kw].(string); ok {
			d.pending = append(d.pending, reference{from: ptr, base: base, ref: ref, dynamic: kw == "$dynamicRef", object: m})
		}
	}
	// Walk in a fixed order so errors are deterministic.
	for _, kw := range sortedKeys(m) {
		sub := m[kw]
		child := ptr + "/" + escape(kw)
		if inPlace, ok := singleKeywords[kw]; ok && isSchema(sub) {
			if inPlace {
				d.inPlace[ptr] = append(d.inPlace[ptr], child)
			}
			if err := d.walk(sub, child, base); err != nil {
				return err
			}
			continue
		}
		if inPlace, ok := arrayKeywords[kw]; ok {
			if arr, ok := sub.([]any); ok {
				for i, s := range arr {
					c := fmt.Sprintf("%s/%d", child, i)
					if inPlace {
						d.inPlace[ptr] = append(d.inPlace[ptr], c)
					}
					if err := d.walk(s, c, base); err != nil {
						return err
					}
				}
			}
			continue
		}
		if inPlace, ok := mapKeywords[kw]; ok {
			if obj, ok := sub.(map[string]any); ok {
				for _, k := range sortedKeys(obj) {
					s := obj[k]
					if kw == "dependencies" && !isSchema(s) {
						continue // the draft-07 list-of-names form
					}
					c := child + "/" + escape(k)
					if inPlace {
						d.inPlace[ptr] = append(d.inPlace[ptr], c)
					}
					if err := d.walk(s, c, base); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (d *document) addAnchor(base *url.URL, name, ptr string) {
	key := base.String()
	if d.anchors[key] == nil {
		d.anchors[key] = map[string]string{}
	}
	d.anchors[key][name] = ptr
}

// checkKeywords checks the keywords jsonschema-go accepts without looking.
func checkKeywords(m map[string]any, ptr string) error {
	switch t := m["type"].(type) {
	case nil:
	case string:
		if !slices.Contains(validTypes, t) {
			return fmt.Errorf("%s: type %q: want one of %s", where(ptr), t, strings.Join(validTypes, ", "))
		}
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok || !slices.Contains(validTypes, s) {
				return fmt.Errorf("%s: type %v: want one of %s", where(ptr), e, strings.Join(validTypes, ", "))
			}
		}
	}
	if mo, ok := m["multipleOf"]; ok {
		if f, ok := mo.(float64); !ok || f <= 0 {
			return fmt.Errorf("%s: multipleOf must be a number greater than 0", where(ptr))
		}
	}
	for _, kw := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if v, ok := m[kw]; ok {
			if _, ok := v.(float64); !ok {
				return fmt.Errorf("%s: %s must be a number", where(ptr), kw)
			}
		}
	}
	return nil
}

// checkRefs resolves every reference and rejects reference cycles that do
// not descend into the value, and schemas too branchy to validate.
func (d *document) checkRefs() error {
	for _, r := range d.pending {
		target, err := d.resolve(r)
		if err != nil {
			return err
		}
		d.targets[identity(r.object)] = d.nodes[target]
		d.inPlace[r.from] = append(d.inPlace[r.from], target)
		if r.dynamic {
			// A $dynamicRef may land on any $dynamicAnchor of the same name
			// in the dynamic scope; assume the worst.
			if u, err := url.Parse(r.ref); err == nil && u.Fragment != "" && !strings.HasPrefix(u.Fragment, "/") {
				d.inPlace[r.from] = append(d.inPlace[r.from], d.dynamic[u.Fragment]...)
			}
		}
	}
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	count := map[string]int{}
	var visit func(p string) error
	visit = func(p string) error {
		state[p] = active
		n := 1
		for _, c := range d.inPlace[p] {
			switch state[c] {
			case active:
				return fmt.Errorf("%s: references loop back to %s without descending into the value, so validation would never end", where(p), where(c))
			case unvisited:
				if err := visit(c); err != nil {
					return err
				}
			}
			n += count[c]
			if n > maxInPlace {
				return fmt.Errorf("%s: too complex: a value would be checked against more than %d subschemas", where(p), maxInPlace)
			}
		}
		state[p] = done
		count[p] = n
		return nil
	}
	for _, p := range sortedKeys(d.nodes) {
		if state[p] == unvisited {
			if err := visit(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolve finds the pointer of the schema a reference names. Only
// references within the document are supported, as in Compile.
func (d *document) resolve(r reference) (string, error) {
	kw := "$ref"
	if r.dynamic {
		kw = "$dynamicRef"
	}
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("%s: %s %q: %s", where(r.from), kw, r.ref, why)
	}
	u, err := url.Parse(r.ref)
	if err != nil {
		return fail(err.Error())
	}
	target := r.base.ResolveReference(u)
	frag := target.Fragment
	target.Fragment, target.RawFragment = "", ""
	res, ok := d.resources[target.String()]
	if !ok {
		return fail("only references within the schema are supported")
	}
	switch {
	case frag == "":
		return res, nil
	case strings.HasPrefix(frag, "/"):
		p := res + frag
		if _, ok := d.nodes[p]; !ok {
			return fail("no schema at that location")
		}
		return p, nil
	default:
		p, ok := d.anchors[target.String()][frag]
		if !ok {
			return fail("no such anchor")
		}
		return p, nil
	}
}

// target returns the schema that the $ref (or $dynamicRef) of object m
// names, or nil when m has none.
func (d *document) target(m map[string]any) any {
	return d.targets[identity(m)]
}

// identity names a decoded schema object. Maps do not move, and the
// document keeps them alive as long as the key is used.
func identity(m map[string]any) uintptr {
	return reflect.ValueOf(m).Pointer()
}

func isSchema(v any) bool {
	switch v.(type) {
	case map[string]any, bool:
		return true
	}
	return false
}

func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func where(ptr string) string {
	if ptr == "" {
		return "schema root"
	}
	return "schema at " + ptr
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var errNoValue = errors.New("the schema admits no value")
