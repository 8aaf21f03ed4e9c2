package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxDepth bounds the nesting of YAML values, so that a hostile file cannot
// exhaust the stack of the recursive walks below.
const maxDepth = 64

// decoder walks yaml.Node trees of one file and collects every problem it
// finds, so that one run reports all of a file's mistakes, each with its
// line and key.
type decoder struct {
	file string
	errs []*Error
	// deepReported and budgetReported keep a runaway structure to one error.
	deepReported, budgetReported bool
	// budget is how many more nodes the walk may visit. It is proportional
	// to the file size, which no alias-free document can exceed, so it only
	// stops alias bombs ("billion laughs") and alias cycles.
	budget int
}

func newDecoder(file string, size int) *decoder {
	return &decoder{file: file, budget: 4*size + 1024}
}

// maxErrors is how many errors one file reports: past that, the rest are
// almost always echoes of one mistake (a mis-indented block, a wrong file).
const maxErrors = 50

// finish returns the errors in document order (the errors of $ref'd
// schema files last), at most maxErrors of them and a count of the rest.
func (d *decoder) finish() []*Error {
	sort.SliceStable(d.errs, func(i, j int) bool {
		ei, ej := d.errs[i], d.errs[j]
		if (ei.File == d.file) != (ej.File == d.file) {
			return ei.File == d.file
		}
		return ei.Line < ej.Line
	})
	if len(d.errs) > maxErrors {
		more := len(d.errs) - maxErrors
		d.errs = append(d.errs[:maxErrors:maxErrors], &Error{File: d.file, Msg: fmt.Sprintf("%d more errors not shown", more)})
	}
	return d.errs
}

func (d *decoder) fail(n *yaml.Node, key, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// failed reports whether an error was already recorded for key, so that a
// later, derived check does not report the same mistake twice.
func (d *decoder) failed(key string) bool {
	for _, e := range d.errs {
		if e.Key == key || strings.HasPrefix(e.Key, key+"[") || strings.HasPrefix(e.Key, key+".") {
			return true
		}
	}
	return false
}

// visit charges one node against the budget.
func (d *decoder) visit() bool {
	d.budget--
	return d.budget >= 0
}

// tooDeep reports a value nested deeper than maxDepth, once per walk: one
// mistake (or one alias cycle) deserves one message.
func (d *decoder) tooDeep(n *yaml.Node, key string, depth int) bool {
	if depth <= maxDepth {
		return false
	}
	if !d.deepReported {
		d.deepReported = true
		d.fail(n, topKey(key), "nested more than %d levels deep", maxDepth)
	}
	return true
}

// topKey is the first component of a key path: where a runaway structure
// starts, rather than the long path to where a limit stopped it.
func topKey(key string) string {
	if i := strings.IndexAny(key, ".["); i > 0 {
		return key[:i]
	}
	return key
}

// walk runs one top-level conversion (fn) of n, at key, and reports an
// exhausted budget there.
func (d *decoder) walk(n *yaml.Node, key string, fn func() bool) bool {
	d.deepReported = false
	ok := fn()
	if d.budget < 0 && !d.budgetReported {
		d.budgetReported = true
		d.fail(n, key, "aliases expand to too much data")
		return false
	}
	return ok && d.budget >= 0
}

// jsonValue converts n to JSON; see writeJSON.
func (d *decoder) jsonValue(n *yaml.Node, key string) (json.RawMessage, bool) {
	var buf bytes.Buffer
	ok := d.walk(n, key, func() bool { return d.writeJSON(&buf, n, key, 0) })
	return buf.Bytes(), ok
}

// goValue converts n to Go values; see value.
func (d *decoder) goValue(n *yaml.Node, key string) (any, bool) {
	var v any
	ok := d.walk(n, key, func() bool {
		var ok bool
		v, ok = d.value(n, key, 0)
		return ok
	})
	return v, ok
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems start the messages of yaml's parser, as opposed to its
// scanner. yaml reports the parser's lines counting from 0 (the scanner's
// from 1), so these get one added.
var parserProblems = []string{"did not find expected", "found duplicate %", "found incompatible YAML", "found undefined tag"}

// syntaxError turns a parser error into an *Error with the line the parser
// names, if it names one.
func syntaxError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, p := range parserProblems {
			if strings.HasPrefix(m[2], p) {
				line++
				break
			}
		}
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// parseMapping parses data as a single YAML document holding a mapping.
func parseMapping(file string, data []byte, what string) (*yaml.Node, *Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Line: 1, Msg: "empty file: want " + what}
		}
		return nil, syntaxError(file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(file, err)
	default:
		return nil, &Error{File: file, Line: next.Line, Msg: "more than one YAML document: want one per file"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: file, Line: 1, Msg: "empty file: want " + what}
	}
	root := doc.Content[0]
	if root.Kind == yaml.AliasNode {
		root = root.Alias
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Msg: "want " + what + ", got " + describe(root)}
	}
	return root, nil
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// describe names the kind of a value for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	n = resolve(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", clip(n.Value))
		case "!!int":
			return "the integer " + clip(n.Value)
		case "!!float":
			return "the number " + clip(n.Value)
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "null"
		case "!!binary":
			return "binary data"
		case "!!timestamp":
			return "the timestamp " + clip(n.Value)
		}
		return "a value tagged " + n.ShortTag()
	}
	return "an alias"
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// field is one key of a mapping and its value.
type field struct {
	key *yaml.Node
	val *yaml.Node
}

// fields checks m's keys against allowed and returns the values by key.
// Unknown keys (with a suggestion when one is a near miss), repeated keys,
// merge keys and non-string keys are reported; prefix is the key path of m
// ("" at the top level).
func (d *decoder) fields(m *yaml.Node, prefix string, allowed []string) map[string]field {
	out := make(map[string]field, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			d.fail(k, prefix, "keys must be plain names, got %s", describe(k))
			continue
		case k.ShortTag() == "!!merge":
			d.fail(k, join(prefix, "<<"), "merge keys (<<) are not supported: write the keys out")
			continue
		}
		name := k.Value
		path := join(prefix, name)
		if !slices.Contains(allowed, name) {
			if s := suggest(name, allowed); s != "" {
				d.fail(k, path, "unknown key; did you mean %q?", s)
			} else {
				d.fail(k, path, "unknown key (known keys: %s)", strings.Join(allowed, ", "))
			}
			continue
		}
		if prev, dup := out[name]; dup {
			d.fail(k, path, "repeated (first at line %d)", prev.key.Line)
			continue
		}
		out[name] = field{key: k, val: v}
	}
	return out
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// suggest returns the known key name is a near miss of (a typo, or a
// shortening such as "timeout" for "timeout_seconds"), or "".
func suggest(name string, known []string) string {
	name = strings.ToLower(name)
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" && len(name) >= 4 {
		for _, k := range known {
			if strings.HasPrefix(k, name) {
				return k
			}
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// str decodes a string value. Only YAML strings count: `name: 12` is an
// integer to YAML, and silently taking it as "12" would hide typos such as
// `model: 4o`-style values that parse as numbers.
func (d *decoder) str(n *yaml.Node, key string) (string, bool) {
	r := resolve(n)
	if r == nil || r.Kind != yaml.ScalarNode || r.ShortTag() != "!!str" {
		d.fail(n, key, "want a string, got %s", describe(n))
		return "", false
	}
	return r.Value, true
}

// scalarText decodes a scalar of any type as its text: for command
// arguments and environment values, where `args: [--port, 8080]` means the
// string "8080".
func (d *decoder) scalarText(n *yaml.Node, key string) (string, bool) {
	r := resolve(n)
	if r == nil || r.Kind != yaml.ScalarNode || r.ShortTag() == "!!null" {
		d.fail(n, key, "want a string, got %s", describe(n))
		return "", false
	}
	return r.Value, true
}

// item is one element of a list of strings.
type item struct {
	Value string
	Node  *yaml.Node
	Key   string // "tools[2]"
}

// strList decodes a list of strings; null is an empty list. Elements that
// are not strings are reported and left out.
func (d *decoder) strList(n *yaml.Node, key string) []item {
	if isNull(n) {
		return nil
	}
	r := resolve(n)
	if r.Kind != yaml.SequenceNode {
		d.fail(n, key, "want a list of strings, got %s", describe(n))
		return nil
	}
	var items []item
	for i, e := range r.Content {
		k := fmt.Sprintf("%s[%d]", key, i)
		if s, ok := d.str(e, k); ok {
			items = append(items, item{Value: s, Node: e, Key: k})
		}
	}
	return items
}

// integer decodes an int64.
func (d *decoder) integer(n *yaml.Node, key string) (int64, bool) {
	r := resolve(n)
	var v int64
	if r == nil || r.Kind != yaml.ScalarNode || r.ShortTag() != "!!int" || r.Decode(&v) != nil {
		d.fail(n, key, "want an integer, got %s", describe(n))
		return 0, false
	}
	return v, true
}

// number decodes a float64; integers are numbers too.
func (d *decoder) number(n *yaml.Node, key string) (float64, bool) {
	r := resolve(n)
	var v float64
	if r == nil || r.Kind != yaml.ScalarNode || (r.ShortTag() != "!!int" && r.ShortTag() != "!!float") || r.Decode(&v) != nil {
		d.fail(n, key, "want a number, got %s", describe(n))
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(n *yaml.Node, key string) (bool, bool) {
	r := resolve(n)
	var v bool
	if r == nil || r.Kind != yaml.ScalarNode || r.ShortTag() != "!!bool" || r.Decode(&v) != nil {
		d.fail(n, key, "want true or false, got %s", describe(n))
		return false, false
	}
	return v, true
}

// value converts a YAML value to the Go values encoding/json produces,
// except that integers stay int64: map[string]any, []any, string, int64,
// float64, bool and nil.
func (d *decoder) value(n *yaml.Node, key string, depth int) (any, bool) {
	if !d.visit() || d.tooDeep(n, key, depth) {
		return nil, false
	}
	r := resolve(n)
	switch r.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(r.Content)/2)
		ok := true
		for i := 0; i+1 < len(r.Content); i += 2 {
			k, v := r.Content[i], r.Content[i+1]
			name, kok := mapKey(d, k, key, m)
			if !kok {
				ok = false
				continue
			}
			val, vok := d.value(v, join(key, name), depth+1)
			ok = ok && vok
			m[name] = val
		}
		return m, ok
	case yaml.SequenceNode:
		s := make([]any, 0, len(r.Content))
		ok := true
		for i, e := range r.Content {
			val, vok := d.value(e, fmt.Sprintf("%s[%d]", key, i), depth+1)
			ok = ok && vok
			s = append(s, val)
		}
		return s, ok
	case yaml.ScalarNode:
		return d.scalar(n, key)
	}
	d.fail(n, key, "unsupported YAML value")
	return nil, false
}

// mapKey checks one key of a free-form mapping: a string, not a merge key,
// not repeated. seen holds the keys so far (only its key set is read).
func mapKey[V any](d *decoder, k *yaml.Node, key string, seen map[string]V) (string, bool) {
	r := resolve(k)
	switch {
	case r == nil || r.Kind != yaml.ScalarNode:
		d.fail(k, key, "keys must be strings, got %s", describe(k))
		return "", false
	case r.ShortTag() == "!!merge":
		d.fail(k, key, "merge keys (<<) are not supported: write the keys out")
		return "", false
	}
	if _, dup := seen[r.Value]; dup {
		d.fail(k, join(key, r.Value), "repeated key")
		return "", false
	}
	return r.Value, true
}

func (d *decoder) scalar(n *yaml.Node, key string) (any, bool) {
	r := resolve(n)
	switch r.ShortTag() {
	case "!!null":
		return nil, true
	case "!!str":
		return r.Value, true
	case "!!bool":
		var b bool
		if r.Decode(&b) == nil {
			return b, true
		}
	case "!!int":
		var i int64
		if r.Decode(&i) == nil {
			return i, true
		}
		d.fail(n, key, "integer %s does not fit in 64 bits", clip(r.Value))
		return nil, false
	case "!!float":
		var f float64
		if r.Decode(&f) == nil {
			if math.IsInf(f, 0) || math.IsNaN(f) {
				d.fail(n, key, "%s has no JSON form: use a finite number", r.Value)
				return nil, false
			}
			return f, true
		}
	}
	d.fail(n, key, "want a string, number, boolean or null, got %s", describe(n))
	return nil, false
}

// writeJSON appends n as JSON to buf, keeping the document's key order: a
// JSON Schema's property order is what a model sees and, for structured
// output, the order it writes fields in.
func (d *decoder) writeJSON(buf *bytes.Buffer, n *yaml.Node, key string, depth int) bool {
	if !d.visit() || d.tooDeep(n, key, depth) {
		return false
	}
	r := resolve(n)
	switch r.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := map[string]bool{}
		ok := true
		first := true
		for i := 0; i+1 < len(r.Content); i += 2 {
			k, v := r.Content[i], r.Content[i+1]
			name, kok := mapKey(d, k, key, seen)
			if !kok {
				ok = false
				continue
			}
			seen[name] = true
			if !first {
				buf.WriteByte(',')
			}
			first = false
			writeJSONString(buf, name)
			buf.WriteByte(':')
			ok = d.writeJSON(buf, v, join(key, name), depth+1) && ok
		}
		buf.WriteByte('}')
		return ok
	case yaml.SequenceNode:
		buf.WriteByte('[')
		ok := true
		for i, e := range r.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			ok = d.writeJSON(buf, e, fmt.Sprintf("%s[%d]", key, i), depth+1) && ok
		}
		buf.WriteByte(']')
		return ok
	case yaml.ScalarNode:
		v, ok := d.scalar(n, key)
		if !ok {
			return false
		}
		switch x := v.(type) {
		case string:
			writeJSONString(buf, x)
		case int64:
			buf.WriteString(strconv.FormatInt(x, 10))
		default: // nil, bool, finite float64
			b, _ := json.Marshal(x)
			buf.Write(b)
		}
		return true
	}
	d.fail(n, key, "unsupported YAML value")
	return false
}

func writeJSONString(buf *bytes.Buffer, s string) {
	// An Encoder, unlike json.Marshal, can leave <, > and & as they are,
	// which keeps regex patterns in schemas readable.
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Truncate(buf.Len() - 1)
}
