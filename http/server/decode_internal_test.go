package server

import (
	"errors"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
)

// TestDecodeRefusesWhatCannotRoundTrip: bodies that encoding/json would
// accept but alter (invalid UTF-8, lone surrogates, duplicate keys) or
// that no JSON consumer can read back (numbers beyond float64), and body
// request ids that the header would not be allowed to carry, are all
// 400s naming what is wrong.
func TestDecodeRefusesWhatCannotRoundTrip(t *testing.T) {
	long := strings.Repeat("a", MaxRequestIDLen+1)
	for _, tc := range []struct{ body, want string }{
		{"{\"input\":\"\xff\"}", "invalid UTF-8 at offset 10"},
		{"{\"input\":{\"k\xc3\":1}}", "invalid UTF-8 at offset 12"},
		{"{\"input\":\"\xed\xa0\x80\"}", "invalid UTF-8 at offset 10"}, // an encoded surrogate
		{`{"input":"\ud800"}`, `unpaired surrogate \ud800 at offset 10`},
		{`{"input":"\udc00x"}`, `unpaired surrogate \udc00 at offset 10`},
		{`{"input":"a\uD83D\u0041"}`, `unpaired surrogate \uD83D at offset 11`},
		{`{"input":"\ud83d"}`, `unpaired surrogate`},
		{`{"input":{"\\":"\\\ud800"}}`, `unpaired surrogate \ud800 at offset 18`},
		{`{"input":1,"input":2}`, `duplicate key "input"`},
		{`{"input":{"a":1,"b":{"c":[{"d":1,"d":2}]}}}`, `duplicate key "d" in input.b.c[0]`},
		{`{"input":{"a":1,"\u0061":2}}`, `duplicate key "a" in input`},
		{`{"task":{"input":1},"task":{"input":2}}`, `duplicate key "task"`},
		{`{"input":1e400}`, `number 1e400 at offset`},
		{`{"input":[1,-2E+999]}`, `number -2E+999`},
		{`{"input":1,"metadata":{"k":"v"},"request_id":"has space"}`, `request_id`},
		{`{"input":1,"request_id":"` + long + `"}`, `request_id`},
		{`{"task":{"input":1},"request_id":"tab\there"}`, `request_id`},
		{`{"task":{"input":1,"request_id":"é"}}`, `task.request_id`},
		// encoding/json matches field names without regard to case, so a
		// case variant would be a duplicate that silently wins.
		{`{"input":1,"INPUT":2}`, `unknown field "INPUT": field names are case-sensitive; did you mean "input"?`},
		{`{"Input":1}`, `unknown field "Input"`},
		{`{"input":1,"Metadata":{"k":"v"}}`, `unknown field "Metadata"`},
		{`{"task":{"input":1,"Input":2}}`, `unknown field "task.Input"`},
		{`{"Task":{"input":1}}`, `unknown field "Task"`},
		{`{"input":1,"request_\u0049d":"x"}`, `unknown field "request_Id"`},
	} {
		_, _, err := decodeRunBody([]byte(tc.body))
		if err == nil || !errors.Is(err, svc.ErrSpecValidation) || StatusOf(err) != 400 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeRunBody(%q) = %v, want a 400 containing %q", tc.body, err, tc.want)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"tasks":[{"input":1}],"max_concurrency":1e30}`, "max_concurrency"},
		{`{"tasks":[{"input":1}],"max_concurrency":99999999999999999999}`, "max_concurrency"},
		{`{"tasks":[{"input":1e400}]}`, "number 1e400"},
		{`{"tasks":[{"input":1,"request_id":"a b"}]}`, "tasks[0].request_id"},
		{`{"tasks":[{"input":1}],"tasks":[]}`, `duplicate key "tasks"`},
		{`{"tasks":[{"input":1},{"input":1,"iNPUT":2}]}`, `unknown field "tasks[1].iNPUT"`},
		{`{"tasks":[{"input":1}],"Max_Concurrency":2}`, `unknown field "Max_Concurrency"`},
	} {
		_, err := decodeGatherBody([]byte(tc.body))
		if err == nil || StatusOf(err) != 400 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeGatherBody(%q) = %v, want a 400 containing %q", tc.body, err, tc.want)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"target":"echo","task":{"input":1},"request_id":"a\u0007"}`, "request_id"},
		{`{"target":"echo","task":{"input":1,"request_id":"` + long + `"}}`, "task.request_id"},
		{`{"target":"e\udfff","task":{"input":1}}`, "unpaired surrogate"},
		{`{"target":"echo","target":"other","task":{"input":1}}`, `duplicate key "target"`},
		{`{"target":"echo","TARGET":"other","task":{"input":1}}`, `unknown field "TARGET"`},
		{`{"target":"echo","task":{"input":1,"Request_ID":"x"}}`, `unknown field "task.Request_ID"`},
	} {
		_, _, err := decodeSubmitBody([]byte(tc.body))
		if err == nil || StatusOf(err) != 400 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeSubmitBody(%q) = %v, want a 400 containing %q", tc.body, err, tc.want)
		}
	}
	// What must still pass: pairs, escaped backslashes before a "u",
	// repeated keys in different objects, big but finite numbers, tiny
	// ones, valid request ids.
	for _, body := range []string{
		`{"input":"\ud83d\ude00 \uD83D\uDE00"}`,
		`{"input":"\\ud800"}`,
		`{"input":[{"a":1},{"a":2}],"metadata":{"a":"x"}}`,
		`{"input":{"a":{"a":{"a":1}}}}`,
		`{"input":{"input":1,"Input":2,"INPUT":3},"metadata":{"k":"v","K":"w"}}`,
		`{"input":[1.7976931348623157e308,-1e308,1e-400,123456789012345678901234567890]}`,
		`{"input":"é ✓ 😀","request_id":"req-1:a/b"}`,
		`{"task":{"input":1,"request_id":"` + strings.Repeat("a", MaxRequestIDLen) + `"},"request_id":"x"}`,
	} {
		if _, _, err := decodeRunBody([]byte(body)); err != nil {
			t.Errorf("decodeRunBody(%s): %v", body, err)
		}
	}
}
