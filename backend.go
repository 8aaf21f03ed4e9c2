package svc

import "context"

// Backend is the call surface shared by the in-process runtime and both
// clients. The HTTP router serves a Backend; the HTTP client is one.
// Every call blocks until it has an answer or ctx ends.
type Backend interface {
	GroupBackend

	// Agents lists the registered agent names, sorted.
	Agents(ctx context.Context) ([]string, error)
	// AgentSchema returns the JSON Schemas of an agent's input and output.
	AgentSchema(ctx context.Context, name string) (AgentSchema, error)
	// Run runs one task on an agent and waits for its result. Failures inside
	// the run come back as a result with Success false; rejections (unknown
	// agent, bad input, budget, depth) and the run's timeout are errors.
	Run(ctx context.Context, agent string, task TaskSpec) (AgentResult, error)
	// Gather runs many tasks on one agent, at most maxConcurrency at once
	// (1..MaxGatherConcurrency; DefaultGatherConcurrency is the default of
	// the HTTP route, and 0 is a SpecValidationError like any value out of
	// range), and returns the results in task order.
	// One task's failure is that task's result and never fails the others.
	Gather(ctx context.Context, agent string, tasks []TaskSpec, maxConcurrency int) ([]AgentResult, error)
	// Ready reports whether the backend can take traffic: nil when ready.
	Ready(ctx context.Context) error
	// Close releases what the backend holds. Closing a client does not
	// shut down a runtime it did not create.
	Close() error
}
