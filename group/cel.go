package group

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/svc-dev/svc"
)

// Limits on expressions. Group definitions come from files and HTTP
// clients, and a condition runs on every edge of every run, so neither
// compiling nor evaluating one may take unbounded time.
const (
	// maxExprLen bounds an expression's text; conditions are one-liners.
	maxExprLen = 16 << 10
	// costLimit stops an evaluation after about this many operations
	// (CEL's runtime cost units) with an error instead of spinning.
	costLimit = 1_000_000
)

// The CEL variables. item exists only in the input expression of a
// fan-out edge.
const (
	varOutput   = "output"
	varInput    = "input"
	varMetadata = "metadata"
	varItem     = "item"
)

// exprKind says which edge field an expression came from; it decides the
// environment and the result type.
type exprKind int

const (
	exprWhen exprKind = iota
	exprFanOut
	exprInput
)

func (k exprKind) field() string {
	switch k {
	case exprWhen:
		return "when"
	case exprFanOut:
		return "fan_out"
	default:
		return "input"
	}
}

// envs builds the two environments once: building one costs far more than
// compiling an expression in it. Environments are safe for concurrent use.
var envs = sync.OnceValues(func() (*envPair, error) {
	common := []cel.EnvOption{
		cel.Variable(varOutput, cel.DynType),
		cel.Variable(varInput, cel.DynType),
		cel.Variable(varMetadata, cel.MapType(cel.StringType, cel.StringType)),
		// JSON numbers are doubles; let `output.count > 3` compare them
		// with int literals instead of failing for want of an overload.
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		ext.Lists(),
		ext.Math(),
		ext.Sets(),
	}
	plain, err := cel.NewEnv(common...)
	if err != nil {
		return nil, err
	}
	withItem, err := plain.Extend(cel.Variable(varItem, cel.DynType))
	if err != nil {
		return nil, err
	}
	return &envPair{plain: plain, withItem: withItem}, nil
})

type envPair struct{ plain, withItem *cel.Env }

// expr is one compiled expression with the variables it reads, so an
// evaluation decodes only those.
type expr struct {
	text string
	prg  cel.Program
	uses uint8 // bit set of use* below
}

const (
	useOutput uint8 = 1 << iota
	useInput
	useMetadata
	useItem
)

// compileExpr compiles text as an expression of kind k; fanOut says whether
// the edge fans out (which binds `item` in its input expression). The
// error is a message for an *Error, without the key.
func compileExpr(text string, k exprKind, fanOut bool) (*expr, string) {
	if len(text) > maxExprLen {
		return nil, fmt.Sprintf("expression is %d bytes, more than the %d allowed", len(text), maxExprLen)
	}
	e, err := envs()
	if err != nil {
		// The environment is fixed at build time; failing here is a bug.
		return nil, "CEL environment: " + err.Error()
	}
	env := e.plain
	if k == exprInput && fanOut {
		env = e.withItem
	}
	ast, iss := env.Compile(text)
	if iss.Err() != nil {
		return nil, issuesMessage(iss, k, fanOut)
	}
	out := ast.OutputType()
	switch k {
	case exprWhen:
		if kind := out.Kind(); kind != types.BoolKind && kind != types.DynKind {
			return nil, fmt.Sprintf("gives %s, want bool", out)
		}
	case exprFanOut:
		if kind := out.Kind(); kind != types.ListKind && kind != types.DynKind {
			return nil, fmt.Sprintf("gives %s, want a list", out)
		}
	case exprInput:
		if out.Kind() == types.TypeKind {
			return nil, fmt.Sprintf("gives %s, want a JSON value", out)
		}
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, "does not compile: " + err.Error()
	}
	x := &expr{text: text, prg: prg}
	for _, r := range ast.NativeRep().ReferenceMap() {
		switch r.Name {
		case varOutput:
			x.uses |= useOutput
		case varInput:
			x.uses |= useInput
		case varMetadata:
			x.uses |= useMetadata
		case varItem:
			x.uses |= useItem
		}
	}
	return x, ""
}

// issuesMessage renders CEL's issues on one line ("1:9: undeclared
// reference to 'foo'; ..."), as keys already name the expression and a
// YAML loader prefixes file and line.
func issuesMessage(iss *cel.Issues, k exprKind, fanOut bool) string {
	var b strings.Builder
	b.WriteString("does not compile: ")
	itemHint := false
	for i, e := range iss.Errors() {
		if i > 0 {
			b.WriteString("; ")
		}
		msg := strings.ReplaceAll(e.Message, " (in container '')", "")
		if strings.Contains(msg, "undeclared reference to '"+varItem+"'") {
			itemHint = true
		}
		fmt.Fprintf(&b, "%d:%d: %s", e.Location.Line(), e.Location.Column()+1, msg)
	}
	if itemHint && !(k == exprInput && fanOut) {
		b.WriteString(" (`item` is bound only in the input of a fan_out edge)")
	}
	return b.String()
}

// Vars are the values an edge's expressions see. Output and Input are the
// upstream node's output and input as JSON (empty means null); Metadata is
// the task's metadata; Item is the current item of a fan-out, read only by
// the input expression of a fan-out edge.
type Vars struct {
	Output, Input json.RawMessage
	Metadata      map[string]string
	Item          json.RawMessage
}

// activation resolves the variables without building a map per
// evaluation.
type activation struct {
	output, input, item any
	metadata            map[string]string
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varOutput:
		return a.output, true
	case varInput:
		return a.input, true
	case varMetadata:
		return a.metadata, true
	case varItem:
		return a.item, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

var emptyMetadata = map[string]string{}

// eval runs x over v. Errors are messages for an *Error.
func (x *expr) eval(v Vars) (ref.Val, string) {
	act := activation{metadata: v.Metadata}
	if act.metadata == nil {
		act.metadata = emptyMetadata
	}
	var err error
	if x.uses&useOutput != 0 {
		if act.output, err = decodeJSON(v.Output); err != nil {
			return nil, "output is not JSON: " + err.Error()
		}
	}
	if x.uses&useInput != 0 {
		if act.input, err = decodeJSON(v.Input); err != nil {
			return nil, "input is not JSON: " + err.Error()
		}
	}
	if x.uses&useItem != 0 {
		if act.item, err = decodeJSON(v.Item); err != nil {
			return nil, "item is not JSON: " + err.Error()
		}
	}
	out, _, err := x.prg.Eval(&act)
	if err != nil {
		return nil, fmt.Sprintf("evaluating %s: %v", x.text, err)
	}
	return out, ""
}

// decodeJSON decodes raw for CEL: objects, arrays, strings, bools, null and
// numbers as float64, which is how CEL itself models JSON. Integers too
// large for a float64 to hold exactly (beyond 2^53) stay int64 or uint64,
// so ids pass through expressions unchanged.
func decodeJSON(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return numbers(v), nil
}

// maxExactInt is the largest integer every smaller one of which a float64
// holds exactly.
const maxExactInt = 1 << 53

// numbers replaces the json.Numbers in v, in place.
func numbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") && len(s) > 15 {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				if i > maxExactInt || i < -maxExactInt {
					return i
				}
			} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				return u
			}
		}
		// Beyond float64's range this is ±Inf, which JSON output rejects.
		f, _ := strconv.ParseFloat(s, 64)
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = numbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e)
		}
	}
	return v
}

// Fires reports whether the edge fires: true without a When expression,
// else its value. An expression that fails or gives a non-bool is an
// *Error naming edges[i].when.
func (e *Edge) Fires(v Vars) (bool, error) {
	if e.when == nil {
		return true, nil
	}
	out, msg := e.when.eval(v)
	if msg != "" {
		return false, e.err("when", msg)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, e.err("when", fmt.Sprintf("%s gave %s, want bool", e.When, out.Type().TypeName()))
	}
	return bool(b), nil
}

// Items evaluates the fan_out expression and returns its items as JSON, in
// list order. A value that is not a list, or an item that is not JSON, is an
// *Error naming edges[i].fan_out.
func (e *Edge) Items(v Vars) ([]json.RawMessage, error) {
	if e.fanOut == nil {
		return nil, e.err("fan_out", "edge does not fan out")
	}
	out, msg := e.fanOut.eval(v)
	if msg != "" {
		return nil, e.err("fan_out", msg)
	}
	list, ok := out.(traits.Lister)
	if !ok {
		return nil, e.err("fan_out", fmt.Sprintf("%s gave %s, want a list", e.FanOut, out.Type().TypeName()))
	}
	n, ok := list.Size().(types.Int)
	if !ok {
		return nil, e.err("fan_out", fmt.Sprintf("%s gave a list of unknown size", e.FanOut))
	}
	items := make([]json.RawMessage, 0, int(n))
	for i := types.Int(0); i < n; i++ {
		raw, err := marshalVal(list.Get(i))
		if err != nil {
			return nil, e.err("fan_out", fmt.Sprintf("%s: item %d: %v", e.FanOut, i, err))
		}
		items = append(items, raw)
	}
	return items, nil
}

// BuildInput returns the downstream input: the Input expression's value
// (which sees `item` on a fan-out edge) or, without one, Item on a fan-out
// edge and Output on any other. Failures are *Errors naming
// edges[i].input.
func (e *Edge) BuildInput(v Vars) (json.RawMessage, error) {
	if e.input == nil {
		if e.fanOut != nil {
			return v.Item, nil
		}
		return v.Output, nil
	}
	out, msg := e.input.eval(v)
	if msg != "" {
		return nil, e.err("input", msg)
	}
	raw, err := marshalVal(out)
	if err != nil {
		return nil, e.err("input", fmt.Sprintf("%s: %v", e.Input, err))
	}
	return raw, nil
}

// IsFanOut reports whether the edge runs its target once per item.
func (e *Edge) IsFanOut() bool { return e.FanOut != "" }

func (e *Edge) err(field, msg string) *Error {
	// Only a run evaluates an edge: the expressions compiled, so what
	// fails now is the run, not the group's definition.
	return &Error{Group: e.group, Key: fmt.Sprintf("edges[%d].%s", e.Index, field), Msg: msg, Kind: svc.KindCondition}
}

// marshalVal writes a CEL value as JSON. Ints stay integral (`3`, not
// `3.0`), and so do doubles with an integral value, as encoding/json
// prints them.
func marshalVal(v ref.Val) (json.RawMessage, error) {
	n, err := toJSON(v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Inputs go to models and agents, not into HTML.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// toJSON converts a CEL value to a value encoding/json writes as the
// equivalent JSON.
func toJSON(v ref.Val) (any, error) {
	switch t := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(t), nil
	case types.Int:
		return int64(t), nil
	case types.Uint:
		return uint64(t), nil
	case types.Double:
		f := float64(t)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(t), nil
	case types.Bytes:
		return []byte(t), nil // base64, as protobuf's JSON mapping does
	case types.Timestamp:
		return t.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return strconv.FormatFloat(t.Duration.Seconds(), 'f', -1, 64) + "s", nil
	case *types.Optional:
		if !t.HasValue() {
			return nil, nil
		}
		return toJSON(t.GetValue())
	case *types.Err:
		return nil, t
	case traits.Mapper:
		out := map[string]any{}
		it := t.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			key, err := mapKey(k)
			if err != nil {
				return nil, err
			}
			val, err := toJSON(t.Get(k))
			if err != nil {
				return nil, err
			}
			out[key] = val
		}
		return out, nil
	case traits.Lister:
		n, ok := t.Size().(types.Int)
		if !ok {
			return nil, fmt.Errorf("list of unknown size")
		}
		out := make([]any, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			val, err := toJSON(t.Get(i))
			if err != nil {
				return nil, err
			}
			out = append(out, val)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %s is not a JSON value", v.Type().TypeName())
}

// mapKey gives a map key as a JSON object key: strings as they are, ints,
// uints and bools in their literal form.
func mapKey(k ref.Val) (string, error) {
	switch t := k.(type) {
	case types.String:
		return string(t), nil
	case types.Int:
		return strconv.FormatInt(int64(t), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(t), 10), nil
	case types.Bool:
		return strconv.FormatBool(bool(t)), nil
	}
	return "", fmt.Errorf("a map key of type %s is not a JSON object key", k.Type().TypeName())
}
