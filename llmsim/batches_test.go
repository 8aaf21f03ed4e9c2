package llmsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"

	"github.com/svc-dev/svc/llmsim"
)

// clock is a settable clock for Config.Now.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func batchSim(t *testing.T, c *clock) *llmsim.Server {
	return start(t, llmsim.Config{Now: c.now, BatchDelay: time.Minute, Keys: []string{"k"},
		Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Contains: "refuse"}, Fault: "400", Message: "refused on purpose"}}}})
}

// The OpenAI batch flow through the official SDK: a JSONL file uploaded
// with purpose batch, a batch made from it that stays in progress until
// its delay has passed, then completed with an output file of the
// answers and an error file of the refused request, each by custom_id.
func TestOpenAIBatch(t *testing.T) {
	c := newClock()
	s := batchSim(t, c)
	cl := oai(s, "k")
	ctx := context.Background()
	var in bytes.Buffer
	for _, x := range []struct{ id, text string }{{"a", "hello there"}, {"b", "please refuse"}, {"c", "third"}} {
		line, _ := json.Marshal(map[string]any{"custom_id": x.id, "method": "POST", "url": "/v1/chat/completions",
			"body": oaiParams(x.text)})
		in.Write(append(line, '\n'))
	}
	f, err := cl.Files.New(ctx, openai.FileNewParams{File: openai.File(&in, "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != openai.BatchStatusValidating || b.RequestCounts.Total != 3 {
		t.Fatalf("new batch: %s %+v", b.Status, b.RequestCounts)
	}
	if b, err = cl.Batches.Get(ctx, b.ID); err != nil || b.Status != openai.BatchStatusInProgress || b.OutputFileID != "" {
		t.Fatalf("before its delay: %v %s %q", err, b.Status, b.OutputFileID)
	}
	c.add(time.Minute)
	if b, err = cl.Batches.Get(ctx, b.ID); err != nil || b.Status != openai.BatchStatusCompleted {
		t.Fatalf("after its delay: %v %s", err, b.Status)
	}
	if b.RequestCounts.Completed != 2 || b.RequestCounts.Failed != 1 || b.OutputFileID == "" || b.ErrorFileID == "" || b.Usage.InputTokens == 0 {
		t.Fatalf("completed batch: %+v out=%q err=%q usage=%+v", b.RequestCounts, b.OutputFileID, b.ErrorFileID, b.Usage)
	}
	type line struct {
		CustomID string `json:"custom_id"`
		Response struct {
			StatusCode int                   `json:"status_code"`
			Body       openai.ChatCompletion `json:"body"`
		} `json:"response"`
	}
	read := func(id string) []line {
		res, err := cl.Files.Content(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		var out []line
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var x line
			if err := json.Unmarshal([]byte(l), &x); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			out = append(out, x)
		}
		return out
	}
	got := map[string]string{}
	for _, l := range read(b.OutputFileID) {
		if l.Response.StatusCode != 200 {
			t.Fatalf("output line %+v", l)
		}
		got[l.CustomID] = l.Response.Body.Choices[0].Message.Content
	}
	if got["a"] != "hello there" || got["c"] != "third" || len(got) != 2 {
		t.Fatalf("answers %v", got)
	}
	errs := read(b.ErrorFileID)
	if len(errs) != 1 || errs[0].CustomID != "b" || errs[0].Response.StatusCode != 400 {
		t.Fatalf("errors %+v", errs)
	}
	st := s.BatchStats()
	if st.Created["openai"] != 1 || st.Polled["openai"] != 2 || st.Results["openai"] != 2 || st.Files != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A file whose lines are not all requests makes a batch that failed
// validation, with the line and why; a cancelled batch answers nothing.
func TestOpenAIBatchInvalidAndCancelled(t *testing.T) {
	c := newClock()
	s := batchSim(t, c)
	cl := oai(s, "k")
	ctx := context.Background()
	body := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}]}}
{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}]}}
`
	f, err := cl.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(body), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *openai.Batch {
		b, err := cl.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := mk()
	if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != "duplicate_custom_id" || b.Errors.Data[0].Line != 2 {
		t.Fatalf("invalid file: %s %+v", b.Status, b.Errors.Data)
	}
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}]}}`
	if f, err = cl.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(good), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch}); err != nil {
		t.Fatal(err)
	}
	b = mk()
	if b, err = cl.Batches.Cancel(ctx, b.ID); err != nil || b.Status != openai.BatchStatusCancelling {
		t.Fatalf("cancel: %v %s", err, b.Status)
	}
	c.add(time.Hour)
	if b, err = cl.Batches.Get(ctx, b.ID); err != nil || b.Status != openai.BatchStatusCancelled || b.OutputFileID != "" {
		t.Fatalf("cancelled: %v %s %q", err, b.Status, b.OutputFileID)
	}
	if s.Stats()["k/m"] != 0 {
		t.Fatalf("a cancelled batch's request was answered: %v", s.Stats())
	}
	if _, err := oai(s, "wrong").Batches.Get(ctx, b.ID); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: %v", err)
	}
}

// The Anthropic flow through the official SDK: a message batch in
// progress until its delay has passed, then ended with one result a
// request, succeeded or errored, by custom_id; a cancelled batch's
// requests are canceled.
func TestAnthropicBatch(t *testing.T) {
	c := newClock()
	s := batchSim(t, c)
	cl := ant(s, "k")
	ctx := context.Background()
	var reqs []anthropic.MessageBatchNewParamsRequest
	for _, x := range []struct{ id, text string }{{"a", "hello there"}, {"b", "please refuse"}} {
		p := antParams(x.text)
		reqs = append(reqs, anthropic.MessageBatchNewParamsRequest{CustomID: x.id, Params: anthropic.MessageBatchNewParamsRequestParams{
			Model: p.Model, MaxTokens: p.MaxTokens, Messages: p.Messages}})
	}
	b, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	if b.ProcessingStatus != anthropic.MessageBatchProcessingStatusInProgress || b.RequestCounts.Processing != 2 {
		t.Fatalf("new batch %s %+v", b.ProcessingStatus, b.RequestCounts)
	}
	if _, err := cl.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	if b, err = cl.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); err != nil || b.ProcessingStatus != anthropic.MessageBatchProcessingStatusEnded {
		t.Fatalf("after the delay: %v %s", err, b.ProcessingStatus)
	}
	if b.RequestCounts.Succeeded != 1 || b.RequestCounts.Errored != 1 || b.ResultsURL == "" || b.EndedAt.IsZero() {
		t.Fatalf("ended batch %+v %q", b.RequestCounts, b.ResultsURL)
	}
	st := cl.Messages.Batches.ResultsStreaming(ctx, b.ID, anthropic.MessageBatchResultsParams{})
	got := map[string]anthropic.MessageBatchResultUnion{}
	for st.Next() {
		got[st.Current().CustomID] = st.Current().Result
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if a := got["a"]; a.Type != "succeeded" || a.Message.Content[0].Text != "hello there" || a.Message.Usage.InputTokens == 0 {
		t.Fatalf("a: %+v", a)
	}
	if e := got["b"]; e.Type != "errored" || e.Error.Error.Message != "refused on purpose" {
		t.Fatalf("b: %s %s", e.Type, e.RawJSON())
	}

	b2, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: reqs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if b2, err = cl.Messages.Batches.Cancel(ctx, b2.ID, anthropic.MessageBatchCancelParams{}); err != nil || b2.ProcessingStatus != anthropic.MessageBatchProcessingStatusCanceling {
		t.Fatalf("cancel: %v %s", err, b2.ProcessingStatus)
	}
	if b2, err = cl.Messages.Batches.Get(ctx, b2.ID, anthropic.MessageBatchGetParams{}); err != nil || b2.ProcessingStatus != "ended" || b2.RequestCounts.Canceled != 1 {
		t.Fatalf("cancelled: %v %s %+v", err, b2.ProcessingStatus, b2.RequestCounts)
	}
	if n := s.BatchStats(); n.Created["anthropic"] != 2 || n.Results["anthropic"] != 1 {
		t.Fatalf("stats %+v", n)
	}
	if _, err := cl.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: append(reqs, reqs[0])}); err == nil || !strings.Contains(err.Error(), "not unique") {
		t.Fatalf("duplicate custom_id: %v", err)
	}
}
