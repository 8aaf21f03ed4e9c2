package batch_test

import (
	"context"
	"encoding/json"
	"iter"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/batch"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/stores/memstore"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// simClock is llmsim's clock, moved by the test: a provider batch ends
// when the test says.
type simClock struct{ ns atomic.Int64 }

func (c *simClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *simClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func startSim(t *testing.T, delay time.Duration) (*llmsim.Server, *simClock) {
	t.Helper()
	c := &simClock{}
	c.ns.Store(time.Now().UnixNano())
	sim := llmsim.New(llmsim.Config{Now: c.now, BatchDelay: delay,
		Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Contains: "refuse"}, Fault: "400", Message: "refused on purpose"}}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim, c
}

// simAgent is an agent of provider ("openai", "anthropic") on sim.
func simAgent(name, provider string, sim *llmsim.Server) svc.Agent {
	a := svc.Agent{Name: name, Instructions: "Repeat the text.", InputType: json.RawMessage(`{"type": "string"}`),
		ModelSettings: map[string]any{"api_key": "sk-test", "max_retries": 0, "max_tokens": 100}}
	if provider == "openai" {
		a.Model = "openai:gpt-4o-mini"
		a.ModelSettings["base_url"] = sim.URL() + "/v1"
	} else {
		a.Model = "anthropic:claude-haiku-4-5"
		a.ModelSettings["base_url"] = sim.URL()
	}
	return a
}

func providerRuntime(t *testing.T, agents ...svc.Agent) *supervisor.Runtime {
	t.Helper()
	rt, err := supervisor.New(supervisor.Config{Models: providers.Default()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if err := rt.Register(agents...); err != nil {
		t.Fatal(err)
	}
	return rt
}

func providerManager(t *testing.T, st svc.BatchStore, r batch.Runner, part int) *batch.Manager {
	t.Helper()
	m, err := batch.New(batch.Config{Store: st, Runner: r, Poll: 20 * time.Millisecond, ProviderPoll: batch.MinProviderPoll, ProviderPart: part})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func texts(in ...string) iter.Seq[svc.TaskSpec] {
	return func(yield func(svc.TaskSpec) bool) {
		for i, s := range in {
			t := svc.TaskSpec{Input: json.RawMessage(s)}
			if s == "" {
				t = svc.TaskSpec{Invalid: svc.Errorf(svc.KindSpecValidation, "line %d: not JSON", i+1)}
			}
			if !yield(t) {
				return
			}
		}
	}
}

func allResults(t *testing.T, m *batch.Manager, id string) []svc.AgentResult {
	t.Helper()
	var out []svc.AgentResult
	for r, err := range m.BatchResults(t.Context(), id, svc.BatchByIndex, -1, false) {
		if err != nil {
			t.Fatal(err)
		}
		var res svc.AgentResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

// A batch of mode provider sends its tasks' model calls to the
// provider's batch API, one provider batch a part, and stores each
// answer as its task's result, by index, at the batch price (half the
// list price); a call the provider refused, an unreadable line and an
// input the agent's schema refuses fail alone.
func TestProviderBatch(t *testing.T) {
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			sim, _ := startSim(t, 0)
			a := simAgent("copy", provider, sim)
			m := providerManager(t, memstore.New(), providerRuntime(t, a), 2)
			acc, err := m.SubmitBatch(t.Context(), "copy", texts(`"alpha"`, `"please refuse"`, ``, `42`, `"omega"`),
				svc.BatchOptions{Mode: svc.BatchProvider})
			if err != nil {
				t.Fatal(err)
			}
			st := waitState(t, m, acc.BatchID, svc.BatchCompleted)
			if st.Mode != svc.BatchProvider || st.Counts.Succeeded != 2 || st.Counts.Failed != 3 {
				t.Fatalf("status %+v", st)
			}
			res := allResults(t, m, acc.BatchID)
			if len(res) != 5 {
				t.Fatalf("%d results", len(res))
			}
			var cost float64
			for i, want := range map[int]string{0: `"alpha"`, 4: `"omega"`} {
				r := res[i]
				md := r.Metadata
				if !r.Success || string(r.Output) != want || md.Backend != batch.BackendProviderBatch || md.Model != a.Model || md.TokensUsed == 0 {
					t.Errorf("result %d: %+v", i, r)
				}
				cost += md.CostUSD
			}
			if e := res[1].Error; res[1].Success || e == nil || e.Type != string(svc.KindModel) || !strings.Contains(e.Message, "refused on purpose") {
				t.Errorf("the refused call: %+v", res[1])
			}
			if e := res[2].Error; res[2].Success || e == nil || e.Type != string(svc.KindSpecValidation) {
				t.Errorf("the unreadable line: %+v", res[2])
			}
			if e := res[3].Error; res[3].Success || e == nil || e.Type != string(svc.KindSpecValidation) || !strings.Contains(e.Message, "input_type") {
				t.Errorf("the input the schema refuses: %+v", res[3])
			}
			if math.Abs(st.CostUSD-cost) > 1e-12 || cost == 0 {
				t.Errorf("batch cost %v, results' %v", st.CostUSD, cost)
			}
			// Parts of two tasks: [0, 1] and [4] made a provider batch
			// each; [2, 3] none, both failing before any call.
			if n := sim.BatchStats().Created[provider]; n != 2 {
				t.Errorf("llmsim saw %d provider batches, want 2", n)
			}
		})
	}
}

// The cost of a provider batch's answer is half the list price of its
// tokens (model.BatchDiscounts), at OpenAI as at Anthropic.
func TestProviderBatchCostIsHalf(t *testing.T) {
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			sim, _ := startSim(t, 0)
			a := simAgent("copy", provider, sim)
			m := providerManager(t, memstore.New(), providerRuntime(t, a), 0)
			acc, err := m.SubmitBatch(t.Context(), "copy", texts(`"some words to count here"`), svc.BatchOptions{Mode: svc.BatchProvider})
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, m, acc.BatchID, svc.BatchCompleted)
			r := allResults(t, m, acc.BatchID)[0]
			// llmsim's rule: one token per four bytes; the answer echoes
			// the text (24 bytes: 6 tokens).
			out := int64(6)
			in := r.Metadata.TokensUsed - out
			list, _ := model.DefaultPrices().Cost(a.Model, in, out)
			if !r.Success || in <= 0 || list == 0 || math.Abs(r.Metadata.CostUSD-list/2) > 1e-15 {
				t.Fatalf("cost %v for %d in, %d out; want half the list %v (%+v)", r.Metadata.CostUSD, in, out, list, r)
			}
		})
	}
}

// An agent whose run is not one model call, or whose model has no batch
// API, is refused at submit with a SpecValidationError saying why, and
// nothing is stored.
func TestProviderBatchRefused(t *testing.T) {
	sim, _ := startSim(t, 0)
	tool, err := tools.Func("lookup", "Look up.", svc.AccessRead, func(context.Context, struct{}) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	withTools := simAgent("tooled", "openai", sim)
	withTools.Tools = []svc.Tool{tool}
	spawner := simAgent("spawner", "anthropic", sim)
	spawner.BuiltinTools = []string{"spawn_agents"}
	st := memstore.New()
	m := providerManager(t, st, providerRuntime(t, withTools, spawner, echo(nil)), 0)
	for name, why := range map[string]string{"tooled": "tools (lookup)", "spawner": "spawn_agents", "echo": "no batch API"} {
		_, err := m.SubmitBatch(t.Context(), name, texts(`"x"`), svc.BatchOptions{Mode: svc.BatchProvider})
		if svc.KindOf(err) != svc.KindSpecValidation || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "one model call") {
			t.Errorf("%s: %v; want a SpecValidationError naming %q", name, err, why)
		}
	}
	if _, err := m.SubmitBatch(t.Context(), "nope", texts(`"x"`), svc.BatchOptions{Mode: svc.BatchProvider}); svc.KindOf(err) != svc.KindRegistry {
		t.Errorf("an unknown agent: %v", err)
	}
	if _, err := m.SubmitBatch(t.Context(), "echo", texts(`"x"`), svc.BatchOptions{Mode: "fast"}); svc.KindOf(err) != svc.KindSpecValidation {
		t.Errorf("an unknown mode: %v", err)
	}
	if page, _ := st.ListBatches(t.Context(), "", 0); len(page.Batches) != 0 {
		t.Fatalf("refused batches stored: %+v", page.Batches)
	}
	if n := sim.BatchStats().Created; len(n) != 0 {
		t.Fatalf("provider batches made: %v", n)
	}
}

// A batch whose process stops while its provider batch runs is resumed
// by the next process, which polls the same provider batch (stored with
// the batch) instead of submitting the tasks again; a cancelled batch
// cancels its provider batch.
func TestProviderBatchResumesAndCancels(t *testing.T) {
	sim, clock := startSim(t, time.Hour)
	a := simAgent("copy", "anthropic", sim)
	rt := providerRuntime(t, a)
	st := memstore.New()
	m1, err := batch.New(batch.Config{Store: st, Runner: rt, Poll: 20 * time.Millisecond, ProviderPoll: batch.MinProviderPoll})
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	acc, err := m1.SubmitBatch(t.Context(), "copy", texts(`"one"`, `"two"`, `"three"`), svc.BatchOptions{Mode: svc.BatchProvider})
	if err != nil {
		t.Fatal(err)
	}
	waitProvider := func(id string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			rec, err := st.GetBatch(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			var ps struct {
				Parts []struct{ ID string } `json:"parts"`
			}
			if json.Unmarshal(rec.Provider, &ps) == nil && len(ps.Parts) == 1 && sim.BatchStats().Polled["anthropic"] > 0 {
				return ps.Parts[0].ID
			}
			if time.Now().After(deadline) {
				t.Fatalf("no provider batch polled: %s", rec.Provider)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitProvider(acc.BatchID)
	_ = m1.Close() // the process stops; the batch stays running in the store
	m2 := providerManager(t, st, rt, 0)
	clock.add(time.Hour)
	got := waitState(t, m2, acc.BatchID, svc.BatchCompleted)
	if got.Counts.Succeeded != 3 || got.Resumed != 1 {
		t.Fatalf("resumed batch: %+v", got)
	}
	if n := sim.BatchStats().Created["anthropic"]; n != 1 {
		t.Fatalf("llmsim saw %d provider batches made, want the one, polled again after the restart", n)
	}

	acc2, err := m2.SubmitBatch(t.Context(), "copy", texts(`"never"`), svc.BatchOptions{Mode: svc.BatchProvider})
	if err != nil {
		t.Fatal(err)
	}
	pid := waitProvider(acc2.BatchID)
	if err := m2.CancelBatch(t.Context(), acc2.BatchID); err != nil {
		t.Fatal(err)
	}
	waitState(t, m2, acc2.BatchID, svc.BatchCancelled)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The provider batch was cancelled: llmsim ends it (at a look
		// that may have been on its way) with its call canceled, never
		// answered.
		pb, ok := sim.PeekBatch(pid)
		if ok && (pb == "canceling" || pb == "ended") {
			if n := sim.Stats()["sk-test/claude-haiku-4-5"]; n != 3 {
				t.Fatalf("llmsim answered %d calls, want the first batch's 3", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider batch %s: %q, %v; want canceling (%+v)", pid, pb, ok, sim.BatchStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkProviderBatch: a batch of 10,000 tasks on an OpenAI agent,
// llmsim answering at once, from submit to completed, results stored in
// memstore. provider: one provider batch (request building, the upload,
// llmsim answering the file, reading the output file, the results);
// runtime, the baseline: the same tasks as chat completions, 100 at once.
// llmsim's own work is in both.
func BenchmarkProviderBatch(b *testing.B) {
	for _, mode := range []svc.BatchMode{svc.BatchProvider, svc.BatchRuntime} {
		b.Run(string(mode), func(b *testing.B) { benchBatch(b, mode) })
	}
}

func benchBatch(b *testing.B, mode svc.BatchMode) {
	const n = 10_000
	for b.Loop() {
		sim := llmsim.New(llmsim.Config{})
		if err := sim.Start("127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		a := simAgent("copy", "openai", sim)
		rt, err := supervisor.New(supervisor.Config{Models: providers.Default()})
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.Register(a); err != nil {
			b.Fatal(err)
		}
		m, err := batch.New(batch.Config{Store: memstore.New(), Runner: rt, Poll: 20 * time.Millisecond, ProviderPoll: batch.MinProviderPoll})
		if err != nil {
			b.Fatal(err)
		}
		tasks := func(yield func(svc.TaskSpec) bool) {
			for i := range n {
				if !yield(svc.TaskSpec{Input: json.RawMessage(`"task number ` + strconv.Itoa(i) + `"`)}) {
					return
				}
			}
		}
		acc, err := m.SubmitBatch(context.Background(), "copy", tasks, svc.BatchOptions{Mode: mode})
		if err != nil {
			b.Fatal(err)
		}
		for {
			st, err := m.BatchStatus(context.Background(), acc.BatchID)
			if err != nil {
				b.Fatal(err)
			}
			if st.State == svc.BatchCompleted {
				if st.Counts.Succeeded != n {
					b.Fatalf("%+v", st.Counts)
				}
				break
			}
			if st.State.Terminal() {
				b.Fatalf("%+v", st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = m.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = rt.Shutdown(ctx)
		cancel()
		_ = sim.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/task")
}
