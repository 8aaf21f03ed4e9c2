package model_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestDefaultPrices(t *testing.T) {
	tab := model.DefaultPrices()
	tests := []struct {
		id      string
		in, out int64
		want    float64
		known   bool
	}{
		{"openai:gpt-4o", 1_000_000, 1_000_000, 12.5, true},
		{"openai:gpt-4o-mini", 2_000_000, 0, 0.30, true},
		{"openai:gpt-4.1-mini", 1000, 500, (1000*0.40 + 500*1.60) / 1e6, true},
		// Snapshots are priced as their model.
		{"openai:gpt-4o-2024-08-06", 1_000_000, 0, 2.5, true},
		{"openai:gpt-4o-mini-2024-07-18", 1_000_000, 0, 0.15, true},
		{"anthropic:claude-sonnet-4-20250514", 0, 1_000_000, 15, true},
		{"anthropic:claude-3-5-haiku-latest", 1_000_000, 0, 0.80, true},
		{"anthropic:claude-haiku-4-5", 1_000_000, 1_000_000, 6, true},
		{"anthropic:claude-opus-4-1-20250805", 1_000_000, 0, 15, true},
		// The test provider costs nothing, and is known to.
		{"test:echo", 1_000_000, 1_000_000, 0, true},
		{"test:fail", 5, 5, 0, true},
		// Unknown models are unknown, not free.
		{"openai:gpt-9", 1_000_000, 0, 0, false},
		{"ollama:llama3:8b", 10, 10, 0, false},
		{"openai:gpt-4o-extra", 10, 10, 0, false},
	}
	for _, tt := range tests {
		got, known := tab.Cost(tt.id, tt.in, tt.out)
		if !near(got, tt.want) || known != tt.known {
			t.Errorf("Cost(%s, %d, %d) = %v, %v; want %v, %v", tt.id, tt.in, tt.out, got, known, tt.want, tt.known)
		}
	}
	for _, id := range []string{"openai:gpt-4o", "openai:gpt-4.1", "openai:o3-mini", "anthropic:claude-sonnet-4",
		"anthropic:claude-opus-4", "anthropic:claude-haiku-4-5"} {
		if p, ok := tab.Price(id); !ok || p.InputPerMTok <= 0 || p.OutputPerMTok < p.InputPerMTok {
			t.Errorf("Price(%s) = %+v, %v: want a positive price with output dearer than input", id, p, ok)
		}
	}
	var zero model.PriceTable
	if _, known := zero.Cost("test:echo", 1, 1); known {
		t.Error("the zero PriceTable should know no prices")
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPrices(t *testing.T) {
	for _, f := range []struct{ name, text string }{
		{"prices.yaml", "openai:gpt-4o: {input_per_mtok: 2, output_per_mtok: 4}\n\"ollama:*\":\n  input_per_mtok: 0.5\n  output_per_mtok: 1\nacme:m1: {input_per_mtok: 1e3, output_per_mtok: 0}\n"},
		{"prices.json", `{"openai:gpt-4o": {"input_per_mtok": 2, "output_per_mtok": 4}, "ollama:*": {"input_per_mtok": 0.5, "output_per_mtok": 1}, "acme:m1": {"input_per_mtok": 1000, "output_per_mtok": 0}}`},
	} {
		tab, err := model.LoadPrices(writeFile(t, f.name, f.text))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		check := func(id string, in, out int64, want float64) {
			t.Helper()
			got, known := tab.Cost(id, in, out)
			if !known || !near(got, want) {
				t.Errorf("%s: Cost(%s) = %v, %v; want %v", f.name, id, got, known, want)
			}
		}
		check("openai:gpt-4o", 1_000_000, 1_000_000, 6)        // overridden
		check("openai:gpt-4o-2024-11-20", 1_000_000, 0, 2)     // the override covers snapshots
		check("ollama:llama3:8b", 2_000_000, 1_000_000, 2)     // a provider wildcard
		check("acme:m1", 1000, 1000, 1)                        // a new model
		check("anthropic:claude-sonnet-4-5", 1_000_000, 0, 3)  // defaults stay
		check("test:echo", 1_000_000, 1_000_000, 0)            // ... test:* too
		if _, known := tab.Cost("openai:gpt-9", 1, 1); known { // and unknown stays unknown
			t.Errorf("%s: openai:gpt-9 priced", f.name)
		}
	}

	// An empty file overrides nothing.
	tab, err := model.LoadPrices(writeFile(t, "empty.yaml", ""))
	if err != nil || tab.Len() != model.DefaultPrices().Len() {
		t.Fatalf("empty file: %v, %d entries", err, tab.Len())
	}
}

func TestLoadPricesErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string // substrings after the file name
	}{
		{"not a mapping", "- openai:gpt-4o\n", []string{":1: want a mapping"}},
		{"bad id", "gpt-4o: {input_per_mtok: 1, output_per_mtok: 2}\n", []string{":1: ", `model "gpt-4o": want provider:name`}},
		{"not an object", "openai:gpt-4o: 3\n", []string{":1: openai:gpt-4o: want {input_per_mtok"}},
		{"unknown key", "openai:gpt-4o:\n  input_per_mtok: 1\n  output_per_mtok: 2\n  cached: 1\n", []string{":4: openai:gpt-4o: unknown key \"cached\""}},
		{"missing output", "openai:gpt-4o: {input_per_mtok: 1}\n", []string{":1: openai:gpt-4o: output_per_mtok is required"}},
		{"missing input", "openai:gpt-4o: {output_per_mtok: 1}\n", []string{"openai:gpt-4o: input_per_mtok is required"}},
		{"negative", "a:b: {input_per_mtok: -1, output_per_mtok: 2}\n", []string{"a:b: input_per_mtok: want a non-negative number", `"-1"`}},
		{"text", "a:b:\n  input_per_mtok: cheap\n  output_per_mtok: 2\n", []string{":2: a:b: input_per_mtok: want a non-negative number", `"cheap"`}},
		{"nan", "a:b: {input_per_mtok: .nan, output_per_mtok: 2}\n", []string{"a:b: input_per_mtok"}},
		{"twice", "a:b: {input_per_mtok: 1, output_per_mtok: 2}\na:b: {input_per_mtok: 1, output_per_mtok: 2}\n", []string{":2: a:b: listed twice"}},
		{"syntax", "a:b: {input_per_mtok: 1\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "p.yaml", tt.text)
			_, err := model.LoadPrices(path)
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Fatalf("err = %v, want a SpecValidationError", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), path+w) && !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := model.LoadPrices(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParsePrices(f *testing.F) {
	f.Add([]byte("openai:gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}\n"))
	f.Add([]byte(`{"a:b": {"input_per_mtok": 1, "output_per_mtok": 2}}`))
	f.Add([]byte("a:b: &x {input_per_mtok: 1, output_per_mtok: 2}\nc:d: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		prices, err := model.ParsePrices("f.yaml", data)
		if err != nil {
			if !errors.Is(err, svc.ErrSpecValidation) {
				t.Fatalf("error %v is not a SpecValidationError", err)
			}
			return
		}
		tab := model.NewPriceTable(prices)
		for id, p := range prices {
			if p.InputPerMTok < 0 || p.OutputPerMTok < 0 || math.IsNaN(p.InputPerMTok+p.OutputPerMTok) || math.IsInf(p.InputPerMTok+p.OutputPerMTok, 0) {
				t.Fatalf("%s: accepted price %+v", id, p)
			}
			if _, known := tab.Cost(id, 1, 1); !known {
				t.Fatalf("%s: parsed but not priced", id)
			}
		}
	})
}

// The new providers' models are priced by their ids as users write them:
// gemini: as google:, a Bedrock inference profile as its model, a
// Mistral "-latest" alias as its model.
func TestProviderPrices(t *testing.T) {
	tab := model.DefaultPrices()
	for _, tt := range []struct {
		id        string
		in, out   int64
		want      float64
		wantKnown bool
	}{
		{"google:gemini-2.5-flash", 1_000_000, 1_000_000, 2.80, true},
		{"gemini:gemini-2.5-flash", 1_000_000, 1_000_000, 2.80, true},
		{"bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", 1_000_000, 1_000_000, 18, true},
		{"bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", 1_000_000, 1_000_000, 18, true},
		{"bedrock:global.amazon.nova-lite-v1:0", 1_000_000, 0, 0.06, true},
		{"bedrock:xx.amazon.nova-lite-v1:0", 1_000_000, 0, 0, false},
		{"azure:gpt-4o-mini", 1_000_000, 0, 0.15, true},
		{"azure:my-deployment", 1_000_000, 0, 0, false},
		{"groq:llama-3.3-70b-versatile", 1_000_000, 1_000_000, 1.38, true},
		{"mistral:mistral-small-latest", 1_000_000, 1_000_000, 0.40, true},
		{"together:meta-llama/Llama-3.3-70B-Instruct-Turbo", 1_000_000, 0, 0.88, true},
		{"vllm:Qwen/Qwen2.5-7B-Instruct", 1_000_000, 0, 0, false},
	} {
		got, known := tab.Cost(tt.id, tt.in, tt.out)
		if !near(got, tt.want) || known != tt.wantKnown {
			t.Errorf("Cost(%s) = %v, %v; want %v, %v", tt.id, got, known, tt.want, tt.wantKnown)
		}
	}
	if got, _ := tab.CostCached("google:gemini-2.5-flash", 1_000_000, 1_000_000, 0); !near(got, 0.03) {
		t.Errorf("a cached Gemini prompt costs %v, want the caching rate 0.03", got)
	}
	if w, ok := model.ContextWindow("gemini:gemini-2.5-pro"); !ok || w != 1_048_576 {
		t.Errorf("gemini-2.5-pro window %d, %v", w, ok)
	}
}

// A call through a provider's batch API costs half the list price at
// OpenAI and Anthropic, input, cached input and output alike; a provider
// with no batch price pays the list price.
func TestBatchCost(t *testing.T) {
	pt := model.DefaultPrices()
	for _, id := range []string{"openai:gpt-4o-mini", "anthropic:claude-haiku-4-5-20251001"} {
		list, ok := pt.CostCached(id, 1_000_000, 200_000, 1_000_000)
		batch, bok := pt.BatchCost(id, 1_000_000, 200_000, 1_000_000)
		if !ok || !bok || list == 0 || math.Abs(batch-list/2) > 1e-12 {
			t.Errorf("%s: batch %v, list %v: want half", id, batch, list)
		}
	}
	// gpt-4o-mini: $0.15 in, $0.075 cached, $0.60 out a million: at half, 1M in (0.2M cached) and 1M out
	// cost (0.8*0.15 + 0.2*0.075 + 0.60) / 2.
	if got, _ := pt.BatchCost("openai:gpt-4o-mini", 1_000_000, 200_000, 1_000_000); math.Abs(got-(0.12+0.015+0.60)/2) > 1e-12 {
		t.Errorf("gpt-4o-mini batch cost %v", got)
	}
	list, _ := pt.Cost("google:gemini-2.5-flash", 1000, 1000)
	if got, _ := pt.BatchCost("google:gemini-2.5-flash", 1000, 0, 1000); got != list {
		t.Errorf("a provider without a batch price: %v, want the list %v", got, list)
	}
}
