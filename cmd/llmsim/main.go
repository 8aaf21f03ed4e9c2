// Command llmsim serves simulated OpenAI (and Azure OpenAI), Anthropic,
// Gemini and Bedrock Converse APIs on one address, so agents and provider tests run without an account. Its
// server is the package github.com/svc-dev/svc/llmsim; `llmsim --help`
// explains every flag.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/llmsim"
)

func main() {
	if err := newRoot(os.Stdout).Execute(); err != nil {
		os.Exit(1)
	}
}

func newRoot(out io.Writer) *cobra.Command {
	var (
		addr, scenario, dist, keys, faults string
		mean, stddev                       time.Duration
		cfg                                llmsim.Config
	)
	cmd := &cobra.Command{
		Use:   "llmsim",
		Short: "Serve simulated OpenAI, Anthropic, Gemini and Bedrock APIs",
		Long: `llmsim serves the OpenAI chat-completions API (POST /v1/chat/completions;
Azure OpenAI's POST /openai/deployments/NAME/chat/completions?api-version=V),
the Anthropic Messages API (POST /v1/messages), the Gemini API
(POST /v1beta/models/MODEL:generateContent, :streamGenerateContent) and
Bedrock's Converse API (POST /model/MODEL_ID/converse, /converse-stream) on
one address, plain and streamed, with tool calls, usage, rate limits,
injected faults, context-window errors and prompt-cache accounting. GET /stats counts calls per key/model;
GET /stats/throttled counts the 429s of the rate limits the same way.

Point an OpenAI client at http://ADDR/v1 and an Anthropic, Gemini, Azure
OpenAI or Bedrock client at http://ADDR. Without a scenario every answer echoes the last user message.
Tokens are counted as one per 4 bytes of text, rounded up.`,
		Example: `  llmsim --addr 127.0.0.1:8700
  llmsim --scenario examples/llmsim/scenario.yaml --rpm 60 --tpm 40000
  llmsim --rpm 6000 --window 1s
  llmsim --latency lognormal --latency-mean 400ms --latency-stddev 200ms --tps 50 --seed 1
  llmsim --fault-rate 0.1 --faults 500,529,reset --keys sk-test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenario != "" {
				sc, err := llmsim.LoadScenario(scenario)
				if err != nil {
					return err
				}
				cfg.Scenario = sc
			}
			switch dist {
			case "fixed", "normal", "lognormal":
			default:
				return fmt.Errorf("--latency %q: want fixed, normal or lognormal", dist)
			}
			cfg.FirstToken = llmsim.Latency{Dist: dist, Mean: mean, StdDev: stddev}
			if keys != "" {
				cfg.Keys = strings.Split(keys, ",")
			}
			if faults != "" {
				cfg.Faults = strings.Split(faults, ",")
			}
			s := llmsim.New(cfg)
			if err := s.Start(addr); err != nil {
				return err
			}
			fmt.Fprintf(out, "llmsim listening on %s\n", s.URL())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8700", "address to listen on, e.g. 127.0.0.1:0 for a free port")
	f.StringVar(&scenario, "scenario", "", "YAML file of rules: match {contains, prompt, model, key} -> reply {text, tool_calls}, delay_ms (this rule's latency, in place of --latency), fault, stall_after_tokens, usage")
	f.StringVar(&dist, "latency", "fixed", "distribution of the latency to the first token: fixed, normal or lognormal")
	f.DurationVar(&mean, "latency-mean", 0, "mean latency to the first token, e.g. 300ms")
	f.DurationVar(&stddev, "latency-stddev", 0, "standard deviation of that latency (normal, lognormal), e.g. 100ms")
	f.Float64Var(&cfg.TokensPerSecond, "tps", 0, "streamed tokens per second after the first (0 sends at once), e.g. 50")
	f.IntVar(&cfg.RPM, "rpm", 0, "requests per minute per API key and model, refilled continuously (0 unlimited), e.g. 60")
	f.DurationVar(&cfg.Window, "window", 0, "the window --rpm and --tpm are enforced over, as hosted APIs do: 1s lets 6,000 a minute through as 100 a second (0: a whole minute's allowance at once)")
	f.IntVar(&cfg.TPM, "tpm", 0, "prompt tokens per minute per API key and model (0 unlimited), e.g. 40000")
	f.IntVar(&cfg.ContextWindow, "context-window", 0, "largest prompt in tokens; larger ones get each provider's context error (0 unlimited), e.g. 8192")
	f.Float64Var(&cfg.FaultRate, "fault-rate", 0, "chance 0..1 that a request fails with one of --faults, e.g. 0.05")
	f.StringVar(&faults, "faults", "500,529", "faults drawn by --fault-rate: 400, 401, 429, 500, 503, 529 (overloaded), reset (connection reset), malformed")
	f.StringVar(&keys, "keys", "", "comma-separated accepted API keys; others get 401 (empty accepts any)")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed for latencies and faults, so runs repeat")
	f.DurationVar(&cfg.BatchDelay, "batch-delay", 0, "how long a batch (OpenAI /v1/batches, Anthropic /v1/messages/batches) takes before its requests are answered, e.g. 30s")
	return cmd
}
