package emittertest

import (
	"slices"
	"testing"

	"github.com/svc-dev/svc"
)

// CheckPayload reports (with tb.Errorf) an event whose payload does not have
// exactly the keys svc.PayloadKeys gives for its type, plus any of
// svc.OptionalPayloadKeys. An event type without a contract is an error too.
func CheckPayload(tb testing.TB, ev svc.RuntimeEvent) {
	tb.Helper()
	want, ok := svc.PayloadKeys[ev.EventType]
	if !ok {
		tb.Errorf("event type %q has no payload contract", ev.EventType)
		return
	}
	var missing, extra []string
	for _, k := range want {
		if _, ok := ev.Payload[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range ev.Payload {
		if slices.Contains(want, k) || slices.Contains(svc.OptionalPayloadKeys[ev.EventType], k) {
			continue
		}
		extra = append(extra, k)
	}
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	slices.Sort(extra)
	tb.Errorf("%s payload: missing keys %q, unexpected keys %q; want exactly %q", ev.EventType, missing, extra, want)
}
