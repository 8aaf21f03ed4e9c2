package model

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	svc "github.com/svc-dev/svc"
)

// Price is what a model charges, in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok" yaml:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok" yaml:"output_per_mtok"`
	// CachedInputPerMTok prices the input tokens read from the provider's
	// prompt cache; 0 prices them as other input (no discount known).
	CachedInputPerMTok float64 `json:"cached_input_per_mtok,omitempty" yaml:"cached_input_per_mtok"`
}

// Prices are the built-in list prices by "provider:name", used when a
// provider does not report a call's cost itself. They are list prices for
// standard (not batch) input and output tokens, and for input read from
// the prompt cache (Anthropic: cache reads at a tenth of input), as published by
// OpenAI, Anthropic, Google, AWS, Microsoft, Groq, Mistral and Together, checked 2025-11; providers change them, so a
// deployment that bills by them should load its own (LoadPrices).
//
// A key "provider:*" prices every model of the provider that has no entry
// of its own. Model names with a snapshot date ("gpt-4o-2024-08-06",
// "claude-sonnet-4-20250514") or "-latest" are priced as the name without
// it.
//
// Treat Prices as read-only: DefaultPrices copies it.
var Prices = map[string]Price{
	// The deterministic test provider costs nothing.
	"test:*": {},

	// OpenAI, https://openai.com/api/pricing (2025-11).
	"openai:gpt-5":         {1.25, 10, 0.125},
	"openai:gpt-5-mini":    {0.25, 2, 0.025},
	"openai:gpt-5-nano":    {0.05, 0.40, 0.005},
	"openai:gpt-4.1":       {2, 8, 0.5},
	"openai:gpt-4.1-mini":  {0.40, 1.60, 0.1},
	"openai:gpt-4.1-nano":  {0.10, 0.40, 0.025},
	"openai:gpt-4o":        {2.50, 10, 1.25},
	"openai:gpt-4o-mini":   {0.15, 0.60, 0.075},
	"openai:gpt-4-turbo":   {10, 30, 0},
	"openai:gpt-3.5-turbo": {0.50, 1.50, 0},
	"openai:o1":            {15, 60, 7.5},
	"openai:o3":            {2, 8, 0.5},
	"openai:o3-mini":       {1.10, 4.40, 0.55},
	"openai:o4-mini":       {1.10, 4.40, 0.275},

	// Anthropic, https://www.anthropic.com/pricing#api (2025-11). The "-0"
	// names are Anthropic's aliases of the first 4.x snapshots.
	"anthropic:claude-opus-4-5":   {5, 25, 0.5},
	"anthropic:claude-opus-4-1":   {15, 75, 1.5},
	"anthropic:claude-opus-4":     {15, 75, 1.5},
	"anthropic:claude-opus-4-0":   {15, 75, 1.5},
	"anthropic:claude-sonnet-4-5": {3, 15, 0.3},
	"anthropic:claude-sonnet-4":   {3, 15, 0.3},
	"anthropic:claude-sonnet-4-0": {3, 15, 0.3},
	"anthropic:claude-haiku-4-5":  {1, 5, 0.1},
	"anthropic:claude-3-7-sonnet": {3, 15, 0.3},
	"anthropic:claude-3-5-sonnet": {3, 15, 0.3},
	"anthropic:claude-3-5-haiku":  {0.80, 4, 0.08},
	"anthropic:claude-3-opus":     {15, 75, 1.5},
	"anthropic:claude-3-haiku":    {0.25, 1.25, 0.025},

	// Google Gemini API, paid tier, prompts up to 200k tokens
	// (https://ai.google.dev/gemini-api/docs/pricing, 2025-11); cached
	// input at the context-caching rate. Each is also "gemini:<name>".
	"google:gemini-2.5-pro":        {1.25, 10, 0.125},
	"google:gemini-2.5-flash":      {0.30, 2.50, 0.03},
	"google:gemini-2.5-flash-lite": {0.10, 0.40, 0.01},
	"google:gemini-2.0-flash":      {0.10, 0.40, 0.025},
	"google:gemini-2.0-flash-lite": {0.075, 0.30, 0},

	// Amazon Bedrock, on-demand in us-east-1
	// (https://aws.amazon.com/bedrock/pricing/, 2025-11), by model id; a
	// cross-region inference profile ("us.", "eu.", "apac.", "global.")
	// is priced as its model. Cached input at the cache-read rate.
	"bedrock:anthropic.claude-opus-4-1-20250805-v1:0":   {15, 75, 1.5},
	"bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0": {3, 15, 0.3},
	"bedrock:anthropic.claude-sonnet-4-20250514-v1:0":   {3, 15, 0.3},
	"bedrock:anthropic.claude-haiku-4-5-20251001-v1:0":  {1, 5, 0.1},
	"bedrock:anthropic.claude-3-7-sonnet-20250219-v1:0": {3, 15, 0.3},
	"bedrock:anthropic.claude-3-5-haiku-20241022-v1:0":  {0.80, 4, 0.08},
	"bedrock:amazon.nova-pro-v1:0":                      {0.80, 3.20, 0.20},
	"bedrock:amazon.nova-lite-v1:0":                     {0.06, 0.24, 0.015},
	"bedrock:amazon.nova-micro-v1:0":                    {0.035, 0.14, 0.00875},
	"bedrock:meta.llama3-3-70b-instruct-v1:0":           {0.72, 0.72, 0},

	// Azure OpenAI, Global Standard deployments, priced as OpenAI's
	// (https://azure.microsoft.com/pricing/details/cognitive-services/openai-service/,
	// 2025-11), for deployments named after their model; a deployment of
	// another name needs a price file.
	"azure:gpt-5":        {1.25, 10, 0.125},
	"azure:gpt-5-mini":   {0.25, 2, 0.025},
	"azure:gpt-4.1":      {2, 8, 0.5},
	"azure:gpt-4.1-mini": {0.40, 1.60, 0.1},
	"azure:gpt-4o":       {2.50, 10, 1.25},
	"azure:gpt-4o-mini":  {0.15, 0.60, 0.075},

	// The OpenAI-compatible presets' hosted services, as each lists them
	// (2025-11): https://groq.com/pricing, https://mistral.ai/pricing,
	// https://www.together.ai/pricing. OpenRouter passes on its
	// providers' prices and Ollama and vLLM run on your own machines:
	// give them a price file.
	"groq:llama-3.3-70b-versatile":                         {0.59, 0.79, 0},
	"groq:llama-3.1-8b-instant":                            {0.05, 0.08, 0},
	"mistral:mistral-large":                                {2, 6, 0},
	"mistral:mistral-medium":                               {0.40, 2, 0},
	"mistral:mistral-small":                                {0.10, 0.30, 0},
	"together:meta-llama/Llama-3.3-70B-Instruct-Turbo":     {0.88, 0.88, 0},
	"together:meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo": {0.18, 0.18, 0},
}

func init() {
	// "gemini:" is the google provider's other name.
	for id, p := range Prices {
		if name, ok := strings.CutPrefix(id, "google:"); ok {
			Prices["gemini:"+name] = p
		}
	}
}

// PriceTable prices model calls. The zero value knows no prices; use
// DefaultPrices or LoadPrices. A PriceTable is immutable and safe for
// concurrent use.
type PriceTable struct {
	prices map[string]Price
	// providers holds the "provider:*" entries by provider, so that a
	// model priced by its provider's entry costs one more map lookup.
	providers map[string]Price
}

// NewPriceTable returns a table of exactly the given prices (copied).
func NewPriceTable(prices map[string]Price) PriceTable {
	t := PriceTable{prices: maps.Clone(prices)}
	for id, p := range prices {
		if provider, ok := strings.CutSuffix(id, ":*"); ok {
			if t.providers == nil {
				t.providers = map[string]Price{}
			}
			t.providers[provider] = p
		}
	}
	return t
}

// DefaultPrices returns a table of the built-in Prices.
func DefaultPrices() PriceTable { return NewPriceTable(Prices) }

// With returns a copy of t with prices added, replacing entries of the same
// id.
func (t PriceTable) With(prices map[string]Price) PriceTable {
	m := make(map[string]Price, len(t.prices)+len(prices))
	maps.Copy(m, t.prices)
	maps.Copy(m, prices)
	return NewPriceTable(m)
}

// Len is the number of entries.
func (t PriceTable) Len() int { return len(t.prices) }

// Price returns the price of model id ("provider:name"): its own entry,
// else the entry of its name without a snapshot date or "-latest", else
// the provider's "provider:*" entry.
func (t PriceTable) Price(id string) (Price, bool) {
	if p, ok := t.prices[id]; ok {
		return p, true
	}
	if base := undated(id); base != id {
		if p, ok := t.prices[base]; ok {
			return p, true
		}
	}
	if base, ok := bedrockProfile(id); ok {
		if p, ok := t.Price(base); ok {
			return p, true
		}
	}
	if i := strings.IndexByte(id, ':'); i > 0 {
		if p, ok := t.providers[id[:i]]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// bedrockGeos are the prefixes of Bedrock's cross-region inference
// profiles ("us.anthropic.claude-...").
var bedrockGeos = []string{"us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.", "ca."}

// bedrockProfile is the model id of a Bedrock inference profile id,
// which is priced as its model.
func bedrockProfile(id string) (string, bool) {
	name, ok := strings.CutPrefix(id, "bedrock:")
	if !ok {
		return "", false
	}
	for _, g := range bedrockGeos {
		if rest, ok := strings.CutPrefix(name, g); ok {
			return "bedrock:" + rest, true
		}
	}
	return "", false
}

// Cost is the cost in US dollars of a call to model id that read in and
// wrote out tokens; known is false when the table has no price for id
// (the cost is then 0).
func (t PriceTable) Cost(id string, in, out int64) (usd float64, known bool) {
	return t.CostCached(id, in, 0, out)
}

// CostCached is Cost for a call of which cached of the in input tokens
// were read from the provider's prompt cache, priced at the cached rate
// when the price has one.
func (t PriceTable) CostCached(id string, in, cached, out int64) (usd float64, known bool) {
	p, ok := t.Price(id)
	if !ok {
		return 0, false
	}
	cached = min(max(cached, 0), in)
	rate := p.CachedInputPerMTok
	if rate == 0 {
		rate = p.InputPerMTok
	}
	return (float64(in-cached)*p.InputPerMTok + float64(cached)*rate + float64(out)*p.OutputPerMTok) / 1e6, true
}

// BatchDiscounts are the providers' batch prices as a share of their list
// prices, by provider: a call made through the provider's batch API (a
// batch of mode "provider") costs its list price times this, for input,
// cached input and output alike. Checked 2025-11: OpenAI's Batch API is
// half price (https://platform.openai.com/docs/guides/batch, "50% lower
// costs"; https://openai.com/api/pricing, the Batch column), and so are
// Anthropic's Message Batches
// (https://docs.anthropic.com/en/docs/build-with-claude/batch-processing,
// "50% of standard API prices").
var BatchDiscounts = map[string]float64{
	"openai":    0.5,
	"anthropic": 0.5,
}

// BatchCost is CostCached for a call made through the provider's batch
// API: the list price times the provider's BatchDiscounts share (the list
// price itself for a provider without one).
func (t PriceTable) BatchCost(id string, in, cached, out int64) (usd float64, known bool) {
	usd, known = t.CostCached(id, in, cached, out)
	if provider, _, err := svc.ParseModelID(id); err == nil {
		if f, ok := BatchDiscounts[provider]; ok {
			usd *= f
		}
	}
	return usd, known
}

// snapshot matches the suffixes providers give dated snapshots and moving
// aliases: -2024-08-06, -20250514, -latest.
var snapshot = regexp.MustCompile(`-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$`)

func undated(id string) string {
	// Most ids have no such suffix; the regexp is only run on the ones that
	// end in a digit or "latest".
	if id == "" || !(id[len(id)-1] >= '0' && id[len(id)-1] <= '9' || strings.HasSuffix(id, "-latest")) {
		return id
	}
	if loc := snapshot.FindStringIndex(id); loc != nil {
		return id[:loc[0]]
	}
	return id
}

// LoadPrices reads a price file and returns the built-in Prices extended
// and overridden by it. The file is YAML or JSON (JSON is YAML), a mapping
// from model id to its two prices, both required:
//
//	openai:gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}
//	"ollama:*": {input_per_mtok: 0, output_per_mtok: 0}
//
// Errors are SpecValidationErrors naming the file, the line and the key.
func LoadPrices(path string) (PriceTable, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PriceTable{}, svc.Wrap(svc.KindSpecValidation, err, "prices")
	}
	prices, err := ParsePrices(path, data)
	if err != nil {
		return PriceTable{}, err
	}
	return DefaultPrices().With(prices), nil
}

// ParsePrices reads the price file format of LoadPrices from data; name
// (the file's path) prefixes every error.
func ParsePrices(name string, data []byte) (map[string]Price, error) {
	bad := func(line int, format string, args ...any) error {
		return svc.Errorf(svc.KindSpecValidation, "%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]Price{}, nil // an empty file overrides nothing
		}
		return nil, svc.Wrap(svc.KindSpecValidation, err, name)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]Price{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, bad(root.Line, "want a mapping from model id (provider:name) to {input_per_mtok, output_per_mtok}")
	}
	out := make(map[string]Price, len(root.Content)/2)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		id := k.Value
		if k.Kind != yaml.ScalarNode {
			return nil, bad(k.Line, "model ids must be strings")
		}
		if _, _, err := svc.ParseModelID(id); err != nil {
			return nil, bad(k.Line, "%v", err)
		}
		if _, dup := out[id]; dup {
			return nil, bad(k.Line, "%s: listed twice", id)
		}
		if v.Kind != yaml.MappingNode {
			return nil, bad(v.Line, "%s: want {input_per_mtok: N, output_per_mtok: N}", id)
		}
		var p Price
		var seenIn, seenOut bool
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			var dst *float64
			switch fk.Value {
			case "input_per_mtok":
				dst, seenIn = &p.InputPerMTok, true
			case "output_per_mtok":
				dst, seenOut = &p.OutputPerMTok, true
			default:
				return nil, bad(fk.Line, "%s: unknown key %q (want input_per_mtok, output_per_mtok)", id, fk.Value)
			}
			var f float64
			if fv.Kind != yaml.ScalarNode || fv.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				return nil, bad(fv.Line, "%s: %s: want a non-negative number of US dollars per million tokens, got %q", id, fk.Value, fv.Value)
			}
			*dst = f
		}
		switch {
		case !seenIn:
			return nil, bad(v.Line, "%s: input_per_mtok is required", id)
		case !seenOut:
			return nil, bad(v.Line, "%s: output_per_mtok is required", id)
		}
		out[id] = p
	}
	return out, nil
}
