package modeltest

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
)

// BatchThroughSDK checks a provider's svc.BatchModel against llmsim's
// batch API, through the real SDK: submitted calls make one provider
// batch, in progress until llmsim's processing delay has passed, then
// ended with an answer per call by custom_id, read as Generate reads
// one (text, tokens), and the call the provider refused failing alone
// with its error; a cancelled batch answers none. provider is the name
// llmsim counts its batches under ("openai", "anthropic"); newModel
// returns the provider's model of modelName pointed at sim.
func BatchThroughSDK(t *testing.T, provider string, newModel func(t *testing.T, sim *llmsim.Server) svc.Model, modelName string) {
	t.Helper()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano())
	sim := llmsim.New(llmsim.Config{Now: func() time.Time { return time.Unix(0, now.Load()) }, BatchDelay: time.Minute,
		Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Contains: "refuse"}, Fault: "400", Message: "refused on purpose"}}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	bm, ok := newModel(t, sim).(svc.BatchModel)
	if !ok {
		t.Fatal("the model is not a svc.BatchModel")
	}
	ctx := t.Context()
	like := asks(modelName, "", map[string]any{"max_retries": 0, "max_tokens": 100})
	call := func(id, text string) svc.BatchCall {
		return svc.BatchCall{CustomID: id, Request: asks(modelName, text, map[string]any{"max_retries": 0, "max_tokens": 100})}
	}
	if _, err := bm.SubmitCalls(ctx, nil); err == nil {
		t.Error("a batch of no calls was submitted")
	}
	id, err := bm.SubmitCalls(ctx, []svc.BatchCall{call("0", "hello there"), call("1", "please refuse"), call("2", "third")})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := bm.PollCalls(ctx, id, &like)
	if err != nil || pb.Ended || pb.ID != id || pb.Status == "" {
		t.Fatalf("before its delay: %+v %v", pb, err)
	}
	now.Add(int64(time.Minute))
	if pb, err = bm.PollCalls(ctx, id, &like); err != nil || !pb.Ended || pb.Succeeded != 2 || pb.Failed != 1 || pb.Total != 3 || pb.Error != "" {
		t.Fatalf("after its delay: %+v %v", pb, err)
	}
	got := map[string]svc.BatchAnswer{}
	for a, err := range bm.CallAnswers(ctx, id, &like) {
		if err != nil {
			t.Fatal(err)
		}
		got[a.CustomID] = a
	}
	for id, text := range map[string]string{"0": "hello there", "2": "third"} {
		a := got[id]
		var out string
		if a.Err != nil || json.Unmarshal(a.Response.Output, &out) != nil || out != text || a.Response.InputTokens == 0 || a.Response.OutputTokens == 0 {
			t.Errorf("answer %s: %+v, %v; want %q with tokens", id, a.Response, a.Err, text)
		}
	}
	var pe *model.ProviderError
	if a := got["1"]; !errors.As(a.Err, &pe) || pe.Class != model.ClassInvalid || !strings.Contains(pe.Message, "refused on purpose") {
		t.Errorf("the refused call: %v, want its invalid-request ProviderError", a.Err)
	}
	if len(got) != 3 {
		t.Errorf("%d answers, want 3", len(got))
	}

	id2, err := bm.SubmitCalls(ctx, []svc.BatchCall{call("0", "never answered")})
	if err != nil {
		t.Fatal(err)
	}
	if err := bm.CancelCalls(ctx, id2, &like); err != nil {
		t.Fatal(err)
	}
	if pb, err = bm.PollCalls(ctx, id2, &like); err != nil || !pb.Ended || pb.Succeeded != 0 || pb.Error == "" {
		t.Fatalf("cancelled: %+v %v", pb, err)
	}
	for a, err := range bm.CallAnswers(ctx, id2, &like) {
		if err != nil || a.Err == nil {
			t.Errorf("a cancelled batch answered: %+v %v", a, err)
		}
	}
	if n := sim.BatchStats().Created[provider]; n != 2 {
		t.Errorf("llmsim saw %d batches made, want 2", n)
	}
	if n := sim.Stats()["sk-test/"+modelName]; n != 3 {
		t.Errorf("llmsim answered %d calls, want the first batch's 3", n)
	}
}
