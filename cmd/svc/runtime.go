package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/app"
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
	// prices is the --prices file; "" means the built-in price table.
	prices string
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
	fs.IntVar(&f.opts.MaxSpawnChildren, "max-spawn-children", d.MaxSpawnChildren, "most agents one spawn_agents call may ask for; a call asking for more ends its run with SpawnCapError (overrides runtime.yaml)")
	fs.IntVar(&f.opts.RetryMaxAttempts, "retry-max-attempts", d.RetryMaxAttempts, "attempts per invocation, 1 = no retry (overrides runtime.yaml)")
	fs.Float64Var(&f.opts.RetryBackoffFactor, "retry-backoff-factor", d.RetryBackoffFactor, "growth of the pause between attempts, from 100ms (overrides runtime.yaml)")
	fs.Int64Var(&f.opts.TokenBudget, "token-budget", d.TokenBudget, "tokens all runs together may use until restart or POST /runtime/budget/reset, 0 = no budget (overrides runtime.yaml)"+zeroDefault(d.TokenBudget == 0, "0"))
	fs.Int64Var(&f.opts.MaxTokensPerRun, "max-tokens-per-run", d.MaxTokensPerRun, "tokens one run may use unless its task sets token_budget, 0 = no cap (overrides runtime.yaml)"+zeroDefault(d.MaxTokensPerRun == 0, "0"))
	fs.BoolVar(&f.opts.MCPEagerStart, "mcp-eager-start", d.MCPEagerStart, "start MCP tool servers with the runtime (overrides runtime.yaml)"+zeroDefault(!d.MCPEagerStart, "false"))
	fs.IntVar(&f.opts.DeltaIntervalMS, "delta-interval-ms", d.DeltaIntervalMS, "milliseconds a streamed answer's fragments are gathered before they are handed to subscribers, 0 = hand each on at once (overrides runtime.yaml)")
	fs.Float64Var(&f.opts.ApprovalTimeoutSeconds, "approval-timeout-seconds", d.ApprovalTimeoutSeconds, "seconds a submitted run waits for an approval or an answer before approval-timeout-action, 0 = for ever; agents may set their own (overrides runtime.yaml)"+zeroDefault(d.ApprovalTimeoutSeconds == 0, "0"))
	fs.StringVar(&f.opts.ApprovalTimeoutAction, "approval-timeout-action", "deny", "what an approval timeout does: deny (the model is told no) or fail (the run fails) (overrides runtime.yaml)")
	fs.IntVar(&f.opts.DeltaBytes, "delta-bytes", d.DeltaBytes, "bytes of a streamed answer gathered at most before they are handed on, whatever the interval, 0 = no limit (overrides runtime.yaml)")
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

// options returns the merge of runtime.yaml's options (when the specs have
// the file) with the flags the user set explicitly: flags win.
func (f *runtimeFlags) options(fs *pflag.FlagSet) func(svc.Options) svc.Options {
	return func(o svc.Options) svc.Options {
		if fs.Changed("timeout-seconds") {
			o.TimeoutSeconds = f.opts.TimeoutSeconds
		}
		if fs.Changed("max-spawn-depth") {
			o.MaxSpawnDepth = f.opts.MaxSpawnDepth
		}
		if fs.Changed("max-spawn-children") {
			o.MaxSpawnChildren = f.opts.MaxSpawnChildren
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
		if fs.Changed("max-tokens-per-run") {
			o.MaxTokensPerRun = f.opts.MaxTokensPerRun
		}
		if fs.Changed("mcp-eager-start") {
			o.MCPEagerStart = f.opts.MCPEagerStart
		}
		if fs.Changed("delta-interval-ms") {
			o.DeltaIntervalMS = f.opts.DeltaIntervalMS
		}
		if fs.Changed("delta-bytes") {
			o.DeltaBytes = f.opts.DeltaBytes
		}
		if fs.Changed("approval-timeout-seconds") {
			o.ApprovalTimeoutSeconds = f.opts.ApprovalTimeoutSeconds
		}
		if fs.Changed("approval-timeout-action") {
			o.ApprovalTimeoutAction = f.opts.ApprovalTimeoutAction
		}
		return o
	}
}

// appOptions are the app.Options these flags set.
func (f *runtimeFlags) appOptions(fs *pflag.FlagSet, log *zap.Logger) app.Options {
	return app.Options{SpecsDir: f.specs, FilesRoot: f.filesRoot, PricesFile: f.prices,
		RuntimeOptions: f.options(fs), Logger: log}
}

func (f *runtimeFlags) logger() (*zap.Logger, error) {
	cfg, err := f.logConfig()
	if err != nil {
		return nil, err
	}
	cfg.OutputPaths = []string{"stderr"}
	return cfg.Build()
}

// logConfig is the zap configuration of --log-level and --log-format.
func (f *runtimeFlags) logConfig() (zap.Config, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return zap.Config{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
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
		return zap.Config{}, fmt.Errorf("--log-format %q: want console or json", f.logFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg, nil
}

// logFlushInterval is the longest a line of a buffered log waits in its
// buffer before it is written.
const logFlushInterval = 100 * time.Millisecond

// bufferedLogger is logger writing to w through a buffer (256 KiB, written
// out when full and every logFlushInterval), for svc serve, which logs
// every runtime event and every request: one write(2) per line, each
// under the sink's lock, was a tenth of the server's CPU under load
// (issue 15). Lines reach w at most logFlushInterval late; stop writes out
// what is buffered and stops the flushing goroutine (the process must call
// it before it exits, or lose up to logFlushInterval of lines; a kill -9
// loses them too).
func (f *runtimeFlags) bufferedLogger(w io.Writer) (log *zap.Logger, stop func(), err error) {
	cfg, err := f.logConfig()
	if err != nil {
		return nil, nil, err
	}
	var enc zapcore.Encoder
	if cfg.Encoding == "json" {
		enc = zapcore.NewJSONEncoder(cfg.EncoderConfig)
	} else {
		// zap's console encoder's lines, written faster (logenc.go).
		enc = newFastConsole(cfg.EncoderConfig)
	}
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(w), Size: 256 << 10, FlushInterval: logFlushInterval}
	var core zapcore.Core = zapcore.NewCore(enc, ws, cfg.Level)
	// What zap.Config.Build adds for these configurations.
	if s := cfg.Sampling; s != nil {
		core = zapcore.NewSamplerWithOptions(core, time.Second, s.Initial, s.Thereafter)
	}
	opts := []zap.Option{zap.ErrorOutput(zapcore.Lock(os.Stderr)), zap.AddCaller()}
	if !cfg.DisableStacktrace {
		opts = append(opts, zap.AddStacktrace(zapcore.ErrorLevel))
	}
	return zap.New(core, opts...), func() { _ = ws.Stop() }, nil
}

// flagOf is the flag that sets each app.Options field.
var flagOf = map[string]string{
	"DataDir": "--data-dir", "Store": "--store", "Events": "--events", "Port": "--port", "Host": "--host",
	"MaxBodyBytes": "--max-body-bytes", "SSEHeartbeat": "--sse-heartbeat", "SSEQueueSize": "--sse-queue-size",
	"Metrics": "--metrics", "Reload": "--reload", "ReloadInclude": "--reload-include", "PricesFile": "--prices",
	"FilesRoot": "--files-root", "Broker": "--broker", "NATSListen": "--nats-listen", "Worker": "--agents",
	"AckWait": "--ack-wait", "MaxDeliver": "--max-deliver", "NodeID": "--node-id",
	"DashboardDir": "--dashboard-dir",
}

// defaultSpecsHint refuses to start on the default --specs directory when
// it is not there: run outside the repository, the default (examples/specs,
// relative to the working directory) names nothing, and a bare "no such
// file" would not say that --specs is the way out.
func (f *runtimeFlags) defaultSpecsHint(fs *pflag.FlagSet) error {
	if fs.Changed("specs") || f.specs == "" {
		return nil
	}
	if _, err := os.Stat(f.specs); err == nil || !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	wd, _ := os.Getwd()
	return &exitError{code: 2, err: fmt.Errorf("no --specs given, and the default %s does not exist in %s: "+
		"pass --specs DIR, a directory of agents/*.yaml and groups/*.yaml (svc validate DIR checks one)", f.specs, wd)}
}

// appError turns an error of app.New or Start into the command's: a
// problem with the options is bad usage (exit 2), named by its flag; any
// other failure (a port in use, say) exits 1.
func appError(specs string, err error) error {
	var ce *app.ConfigError
	if !errors.As(err, &ce) {
		return &exitError{code: 1, err: err}
	}
	switch ce.Option {
	case "SpecsDir":
		return specError(specs, ce.Err)
	case "ServeAgents":
		// Its messages name --agents and --groups themselves.
		return &exitError{code: 2, err: ce.Err}
	case "RuntimeOptions":
		// runtime.yaml was validated by the loader, so a bad value here
		// came from a flag.
		return &exitError{code: 2, err: fmt.Errorf("runtime options: %w", ce.Err)}
	}
	if flag, ok := flagOf[ce.Option]; ok {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", flag, ce.Err)}
	}
	return &exitError{code: 2, err: ce.Err}
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
