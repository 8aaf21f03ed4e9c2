package eventstore

import (
	"reflect"
	"testing"
)

// FuzzPayload feeds decodePayload what could be in a payload column of a
// file another process wrote: it must not panic, and what it accepts must
// survive another round trip unchanged.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"a":1,"b":[1,"x",null],"c":{"d":true}}`, `[]`, `"x"`, `{"a":1e400}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePayload(b)
		if err != nil {
			return
		}
		if p == nil {
			t.Fatal("decodePayload returned a nil payload without an error")
		}
		again, err := decodePayload(encodePayload(p))
		if err != nil {
			t.Fatalf("re-decoding %s: %v", encodePayload(p), err)
		}
		if !reflect.DeepEqual(p, again) {
			t.Fatalf("round trip changed %#v into %#v", p, again)
		}
	})
}
