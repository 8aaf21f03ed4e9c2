package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/emitters"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
	"github.com/svc-dev/svc/tools"
)

// runtimeFlags are the flags shared by every command that builds a runtime
// from a specs directory: the runtime options by their spec names, and where
// the file tools may read and write.
type runtimeFlags struct {
	specs     string
	filesRoot string
	opts      svc.Options
	logLevel  string
	logFormat string

	// env is what the specs were loaded against, kept by buildRuntime so
	// that a reload checks them against the same tools and models.
	env spec.Env
	// store keeps submitted runs; nil means the runtime's own, in memory.
	store svc.RunStore
	// prices is the --prices file; "" means the built-in price table.
	prices string
	// meterProvider, when set, receives the actor system's metrics.
	meterProvider metric.MeterProvider
}

func (f *runtimeFlags) register(fs *pflag.FlagSet, specsDefault string) {
	d := svc.DefaultOptions()
	specsUsage := "directory of specs: agents/*.yaml, groups/*.yaml and runtime.yaml"
	if specsDefault == "" {
		specsUsage += " (default: none)"
	}
	fs.StringVar(&f.specs, "specs", specsDefault, specsUsage)
	fs.StringVar(&f.filesRoot, "files-root", "", "directory the read_file and write_file tools are confined to (default: none, those tools fail)")
	fs.Float64Var(&f.opts.TimeoutSeconds, "timeout-seconds", d.TimeoutSeconds, "seconds one run may take (overrides runtime.yaml)")
	fs.IntVar(&f.opts.MaxSpawnDepth, "max-spawn-depth", d.MaxSpawnDepth, "deepest nesting of agent invocations (overrides runtime.yaml)")
	fs.IntVar(&f.opts.RetryMaxAttempts, "retry-max-attempts", d.RetryMaxAttempts, "attempts per invocation, 1 = no retry (overrides runtime.yaml)")
	fs.Float64Var(&f.opts.RetryBackoffFactor, "retry-backoff-factor", d.RetryBackoffFactor, "growth of the pause between attempts, from 100ms (overrides runtime.yaml)")
	fs.Int64Var(&f.opts.TokenBudget, "token-budget", d.TokenBudget, "tokens one request may use, 0 = no budget (overrides runtime.yaml)"+zeroDefault(d.TokenBudget == 0, "0"))
	fs.BoolVar(&f.opts.MCPEagerStart, "mcp-eager-start", d.MCPEagerStart, "start MCP tool servers with the runtime (overrides runtime.yaml)"+zeroDefault(!d.MCPEagerStart, "false"))
	fs.StringVar(&f.prices, "prices", "", "YAML or JSON file of model prices per million tokens ({\"openai:gpt-4o\": {input_per_mtok: 2.5, output_per_mtok: 10}}), overriding and extending the built-in table that cost_usd uses (default: built-in only)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "console", "log format: console or json")
}

// zeroDefault spells out a zero default, which pflag leaves out of --help.
func zeroDefault(zero bool, value string) string {
	if !zero {
		return ""
	}
	return " (default " + value + ")"
}

// options merges runtime.yaml (when the set has one) with the flags the user
// set explicitly: flags win.
func (f *runtimeFlags) options(fs *pflag.FlagSet, set *spec.Set) svc.Options {
	o := svc.DefaultOptions()
	if set != nil && set.HasOptions {
		o = set.Options
	}
	if fs.Changed("timeout-seconds") {
		o.TimeoutSeconds = f.opts.TimeoutSeconds
	}
	if fs.Changed("max-spawn-depth") {
		o.MaxSpawnDepth = f.opts.MaxSpawnDepth
	}
	if fs.Changed("retry-max-attempts") {
		o.RetryMaxAttempts = f.opts.RetryMaxAttempts
	}
	if fs.Changed("retry-backoff-factor") {
		o.RetryBackoffFactor = f.opts.RetryBackoffFactor
	}
	if fs.Changed("token-budget") {
		o.TokenBudget = f.opts.TokenBudget
	}
	if fs.Changed("mcp-eager-start") {
		o.MCPEagerStart = f.opts.MCPEagerStart
	}
	return o
}

func (f *runtimeFlags) logger() (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	var cfg zap.Config
	switch f.logFormat {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("--log-format %q: want console or json", f.logFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.OutputPaths = []string{"stderr"}
	return cfg.Build()
}

// specEnv is what spec files may refer to: the built-in tools and the model
// providers linked into this binary.
func specEnv(models *model.Registry, filesRoot string) spec.Env {
	return spec.Env{
		Tools:    tools.Builtins(tools.BuiltinOptions{FilesRoot: filesRoot}),
		Builtins: []string{supervisor.SpawnAgents},
		CheckModel: func(id string) error {
			_, err := models.Resolve(id)
			return err
		},
	}
}

// buildRuntime loads the specs and starts a runtime with them.
func (f *runtimeFlags) buildRuntime(fs *pflag.FlagSet, log *zap.Logger, em svc.Emitter) (*supervisor.Runtime, *spec.Set, error) {
	models := providers.Default()
	f.env = specEnv(models, f.filesRoot)
	set, err := spec.Load(f.specs, f.env)
	if err != nil {
		return nil, nil, specError(f.specs, err)
	}
	opts := f.options(fs, set)
	if err := opts.Validate(); err != nil {
		// runtime.yaml was validated by the loader, so a bad value here
		// came from a flag: bad usage, like a bad specs directory.
		return nil, nil, &exitError{code: 2, err: fmt.Errorf("runtime options: %w", err)}
	}
	if em == nil {
		em = emitters.NewLog(log)
	}
	var prices *model.PriceTable
	if f.prices != "" {
		p, err := model.LoadPrices(f.prices)
		if err != nil {
			return nil, nil, &exitError{code: 2, err: fmt.Errorf("--prices: %w", err)}
		}
		prices = &p
	}
	rt, err := supervisor.New(supervisor.Config{Options: opts, Models: models, Prices: prices, Emitter: em, Logger: log,
		Store: f.store, MeterProvider: f.meterProvider})
	if err != nil {
		return nil, nil, err
	}
	if err := rt.Register(set.Agents...); err != nil {
		_ = rt.Close()
		return nil, nil, fmt.Errorf("register agents from %s: %w", f.specs, err)
	}
	if err := rt.RegisterGroups(set.Groups...); err != nil {
		_ = rt.Close()
		return nil, nil, fmt.Errorf("register groups from %s: %w", f.specs, err)
	}
	return rt, set, nil
}

// specError lists every problem of a spec directory, one per line.
func specError(dir string, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "specs %s:", dir)
	for _, line := range strings.Split(err.Error(), "\n") {
		b.WriteString("\n  " + line)
	}
	return &exitError{code: 2, err: fmt.Errorf("%s", b.String())}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
