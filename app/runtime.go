package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model/providers"
	"github.com/svc-dev/svc/spec"
	"github.com/svc-dev/svc/supervisor"
)

// RuntimeConfig is what NewRuntime builds an embedded runtime from.
type RuntimeConfig struct {
	// SpecsDir is the directory of agents/*.yaml, groups/*.yaml and
	// runtime.yaml, as for `svc serve --specs`. Required.
	SpecsDir string
	// Agents and Groups are registered from Go beside the specs; the
	// specs' groups may use these agents.
	Agents []svc.Agent
	Groups []svc.Group
	// FilesRoot confines the read_file and write_file tools; "": those
	// tools fail.
	FilesRoot string
	// RuntimeOptions, when set, is given runtime.yaml's options and
	// returns the ones to run with (the flags of svc serve work this way).
	RuntimeOptions func(fromSpecs svc.Options) svc.Options
	// Runtime is the rest of the runtime's configuration: Emitter,
	// Logger (the LogEventEmitter writes to it unless NoEventLog), Store,
	// Prices, Models (nil: model/providers.Default, every provider linked
	// into svc), ... Its Options must be left zero: they come from
	// runtime.yaml, through RuntimeOptions.
	Runtime supervisor.Config
}

// NewRuntime loads a specs directory into a new runtime with the registry
// `svc serve` builds from it: the specs' agents and groups, the built-in
// tools (current_time, read_file and write_file confined to FilesRoot),
// spawn_agents, the MCP servers the specs name, and the agents and groups
// of cfg. It is the one call an embedder needs before mounting
// server.NewRouter(rt) in its own HTTP server; the runtime is the
// caller's to Shutdown. A spec that does not load is a *ConfigError
// naming SpecsDir whose message lists every problem by file and line.
func NewRuntime(cfg RuntimeConfig) (*supervisor.Runtime, error) {
	if cfg.SpecsDir == "" {
		return nil, &ConfigError{Option: "SpecsDir", Err: errors.New("empty: want a directory of specs")}
	}
	if !cfg.Runtime.Options.IsZero() {
		return nil, &ConfigError{Option: "Runtime.Options", Err: errors.New("set: the options come from runtime.yaml; change them with RuntimeOptions")}
	}
	rcfg := cfg.Runtime
	if rcfg.Models == nil {
		rcfg.Models = providers.Default()
	}
	env := SpecEnv(rcfg.Models, cfg.FilesRoot, cfg.Agents)
	env.RuntimeOptions = cfg.RuntimeOptions
	set, err := spec.Load(cfg.SpecsDir, env)
	if err != nil {
		return nil, &ConfigError{Option: "SpecsDir", Err: err}
	}
	rcfg.Options = set.Options
	if cfg.RuntimeOptions != nil {
		rcfg.Options = cfg.RuntimeOptions(rcfg.Options)
	}
	if err := rcfg.Options.Validate(); err != nil {
		return nil, &ConfigError{Option: "RuntimeOptions", Err: err}
	}
	rt, err := supervisor.New(rcfg)
	if err != nil {
		return nil, fmt.Errorf("app: runtime: %w", err)
	}
	agents := append(append([]svc.Agent(nil), cfg.Agents...), set.Agents...)
	groups := append(append([]svc.Group(nil), cfg.Groups...), set.Groups...)
	if err := rt.Register(agents...); err != nil {
		_ = rt.Close()
		return nil, &ConfigError{Option: "Agents", Err: err}
	}
	if err := rt.RegisterGroups(groups...); err != nil {
		_ = rt.Close()
		return nil, &ConfigError{Option: "Groups", Err: err}
	}
	rt.ResumeRuns(context.Background())
	return rt, nil
}
