package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/schema"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type addArgs struct {
	A    int    `json:"a" jsonschema:"the first addend"`
	B    int    `json:"b"`
	Note string `json:"note,omitempty"`
}

type addResult struct {
	Sum int `json:"sum"`
}

var add = MustFunc("add", "Adds two integers.", svc.AccessRead,
	func(_ context.Context, in addArgs) (addResult, error) {
		return addResult{Sum: in.A + in.B}, nil
	})

func TestFuncMetadata(t *testing.T) {
	if add.Name() != "add" || add.Description() != "Adds two integers." || add.Access() != svc.AccessRead {
		t.Errorf("metadata = %q %q %v", add.Name(), add.Description(), add.Access())
	}
	var s struct {
		Type                 string                     `json:"type"`
		Required             []string                   `json:"required"`
		Properties           map[string]json.RawMessage `json:"properties"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	}
	if err := json.Unmarshal(add.InputSchema(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" || strings.Join(s.Required, ",") != "a,b" {
		t.Errorf("schema %s: want an object requiring a and b", add.InputSchema())
	}
	if !strings.Contains(string(s.Properties["a"]), "the first addend") {
		t.Errorf("property a %s lacks its description", s.Properties["a"])
	}
	if _, ok := s.Properties["note"]; !ok {
		t.Errorf("optional property note missing from %s", add.InputSchema())
	}
	// The schema is what the model sees: an example of it must be accepted.
	ex, err := schema.Example(add.InputSchema())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := add.Call(context.Background(), ex); err != nil {
		t.Errorf("Call with the schema's example %s: %v", ex, err)
	}
}

func TestFuncCall(t *testing.T) {
	tests := []struct {
		args    string
		want    string
		wantErr string
	}{
		{`{"a":2,"b":3}`, `{"sum":5}`, ""},
		{` {"a":2,"b":3,"note":"x"} `, `{"sum":5}`, ""},
		{`{"a":2}`, "", "required"},
		{`{"a":2,"b":"3"}`, "", "type"},
		{`{"a":2,"b":3,"c":4}`, "", "c"},
		{`{"a":2.5,"b":3}`, "", "integer"},
		{`{"a":2,"b":3} {}`, "", "invalid arguments"},
		{`{"a":`, "", "invalid arguments"},
		{`[1,2]`, "", "type"},
		{``, "", "required"}, // empty is {}
	}
	for _, tt := range tests {
		got, err := add.Call(context.Background(), json.RawMessage(tt.args))
		if tt.wantErr == "" {
			if err != nil || string(got) != tt.want {
				t.Errorf("Call(%s) = %s, %v; want %s", tt.args, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("Call(%s) = %s; want an error", tt.args, got)
			continue
		}
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "tool add") || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Call(%s) error %q: want a ToolExecutionError naming the tool and mentioning %q", tt.args, err, tt.wantErr)
		}
	}
}

// looseArgs has a map field: the schema allows any keys inside it, but
// strict decoding still rejects unknown top-level fields.
type looseArgs struct {
	Name string `json:"name"`
}

func TestFuncStrictDecoding(t *testing.T) {
	tool := MustFunc("echo", "", svc.AccessRead, func(_ context.Context, in map[string]int) (map[string]int, error) {
		return in, nil
	})
	got, err := tool.Call(context.Background(), json.RawMessage(`{"x":1}`))
	if err != nil || string(got) != `{"x":1}` {
		t.Errorf("map args = %s, %v", got, err)
	}
	strict := MustFunc("strict", "", svc.AccessRead, func(_ context.Context, in looseArgs) (string, error) {
		return in.Name, nil
	})
	// Decoding is case-sensitive in effect: "NAME" is not "name" for the
	// schema, so it is an unknown property.
	if _, err := strict.Call(context.Background(), json.RawMessage(`{"name":"a","NAME":"b"}`)); err == nil {
		t.Error("differently cased duplicate key accepted")
	}
}

func TestFuncErrors(t *testing.T) {
	boom := errors.New("boom")
	failing := MustFunc("failing", "", svc.AccessRead, func(context.Context, struct{}) (int, error) { return 0, boom })
	_, err := failing.Call(context.Background(), nil)
	if !errors.Is(err, svc.ErrToolExecution) || !errors.Is(err, boom) || !strings.Contains(err.Error(), "tool failing: boom") {
		t.Errorf("function error became %v", err)
	}

	kinded := MustFunc("kinded", "", svc.AccessRead, func(context.Context, struct{}) (int, error) {
		return 0, svc.Errorf(svc.KindBudgetExceeded, "over budget")
	})
	if _, err := kinded.Call(context.Background(), nil); svc.KindOf(err) != svc.KindBudgetExceeded {
		t.Errorf("kinded error became %v (%s)", err, svc.KindOf(err))
	}

	panicky := MustFunc("panicky", "", svc.AccessRead, func(context.Context, struct{}) (int, error) { panic("oops") })
	if _, err := panicky.Call(context.Background(), nil); !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "oops") {
		t.Errorf("panic became %v", err)
	}

	unencodable := MustFunc("unencodable", "", svc.AccessRead, func(context.Context, struct{}) (func(), error) { return func() {}, nil })
	_ = unencodable // For[struct{}] works; Out is not checked until Call
	if _, err := unencodable.Call(context.Background(), nil); !errors.Is(err, svc.ErrToolExecution) {
		t.Errorf("unencodable result gave %v", err)
	}

	ctxTool := MustFunc("ctx", "", svc.AccessRead, func(ctx context.Context, _ struct{}) (int, error) { return 0, ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ctxTool.Call(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call gave %v; want it to wrap context.Canceled", err)
	}
}

func TestFuncDefinitionErrors(t *testing.T) {
	ok := func(context.Context, struct{}) (int, error) { return 0, nil }
	tests := []struct {
		name string
		make func() (svc.Tool, error)
	}{
		{"bad name", func() (svc.Tool, error) { return Func("has space", "", svc.AccessRead, ok) }},
		{"empty name", func() (svc.Tool, error) { return Func("", "", svc.AccessRead, ok) }},
		{"nil fn", func() (svc.Tool, error) {
			return Func[struct{}, int]("nilfn", "", svc.AccessRead, nil)
		}},
		{"bad access", func() (svc.Tool, error) { return Func("x", "", svc.Access(0), ok) }},
		{"unschemable input", func() (svc.Tool, error) {
			return Func("ch", "", svc.AccessRead, func(context.Context, chan int) (int, error) { return 0, nil })
		}},
	}
	for _, tt := range tests {
		if _, err := tt.make(); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("%s: err = %v; want a SpecValidationError", tt.name, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustFunc did not panic on a bad name")
		}
	}()
	MustFunc("bad name", "", svc.AccessRead, ok)
}

type fakeTool struct {
	name   string
	access svc.Access
}

func (f fakeTool) Name() string                 { return f.name }
func (f fakeTool) Description() string          { return "" }
func (f fakeTool) InputSchema() json.RawMessage { return nil }
func (f fakeTool) Access() svc.Access           { return f.access }
func (f fakeTool) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, nil
}

func TestCheckMatrix(t *testing.T) {
	allowed := map[svc.TrustLevel][]svc.Access{
		svc.TrustSandbox: {},
		svc.TrustLow:     {svc.AccessRead},
		svc.TrustMedium:  {svc.AccessRead, svc.AccessNetwork},
		svc.TrustHigh:    {svc.AccessRead, svc.AccessNetwork, svc.AccessWrite},
		"":               {svc.AccessRead, svc.AccessNetwork}, // the default, medium
	}
	for trust, ok := range allowed {
		for _, a := range []svc.Access{svc.AccessRead, svc.AccessNetwork, svc.AccessWrite} {
			t.Run(fmt.Sprintf("%s/%s", trust, a), func(t *testing.T) {
				err := Check(trust, fakeTool{name: "t_" + a.String(), access: a})
				want := false
				for _, x := range ok {
					want = want || x == a
				}
				if want {
					if err != nil {
						t.Errorf("Check = %v; want allowed", err)
					}
					return
				}
				if !errors.Is(err, svc.ErrTrustViolation) {
					t.Fatalf("Check = %v; want a TrustViolationError", err)
				}
				level := trust
				if level == "" {
					level = svc.DefaultTrustLevel
				}
				msg := fmt.Sprintf("tool t_%s needs %s access, which trust level %s does not allow (needs %s or higher)",
					a, a, level, a.MinTrust())
				if err.Error() != msg {
					t.Errorf("message %q; want %q", err, msg)
				}
			})
		}
	}
}
