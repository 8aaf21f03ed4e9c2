// Types of the svc client, written from the schemas of docs/openapi.json
// (components/schemas). test/types.test.js checks that every value this
// file declares is exported by index.js and the other way round.

/** Any JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** TaskSpec: one task for an agent or a group. */
export interface TaskSpec {
  /** Becomes the result's task_id (generated when absent). */
  id?: string;
  /** The agent's input: any JSON value (required). */
  input: JSONValue;
  /** The run's trace id (1 to 128 printable ASCII characters, no spaces). */
  request_id?: string;
  metadata?: Record<string, string>;
  /** Caps the tokens of this run, nested runs included (0: the runtime's max_tokens_per_run). */
  token_budget?: number;
}

/** ErrorInfo: why a run failed (inside a 200 AgentResult). */
export interface ErrorInfo {
  type: string;
  message: string;
  reason?: string;
}

export interface AgentResultMetadata {
  trace_id: string;
  duration_ms: number;
  tokens_used: number;
  cost_usd: number;
  cost_unknown?: boolean;
  model: string;
  attempts: number;
  backend: string;
  models_tried?: string[] | null;
}

/** AgentResult: the answer of one agent run. */
export interface AgentResult {
  agent_name: string;
  task_id: string;
  success: boolean;
  output: JSONValue;
  error: ErrorInfo | null;
  metadata: AgentResultMetadata;
}

export interface GroupResultMetadata {
  trace_id: string;
  group_name: string;
  duration_ms: number;
  tokens_used: number;
  cost_usd: number;
  invocations: number;
  backend: string;
}

/** GroupResult: a group run in which several terminal nodes fired. */
export interface GroupResult {
  group: true;
  outputs: Record<string, AgentResult>;
  success: boolean;
  metadata: GroupResultMetadata;
}

/** RunResult: a group run's answer (or a submitted run's result). */
export type RunResult = AgentResult | GroupResult;

export type RunState = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/** RunProgress: counts of a submitted run's agents. */
export interface RunProgress {
  total: number;
  completed: number;
  failed: number;
  running: number;
}

/** RunStatus: GET /runs/{id}/status. */
export interface RunStatus {
  run_id: string;
  state: RunState | string;
  progress: RunProgress | null;
  /** Why the run failed or was cancelled (interrupted, store_error, timeout, cancelled, ...). */
  reason?: string;
  /**
   * The run's trace id, set at submit: the trace_id of its events and the
   * key of GET /runs/{trace_id}/tree. Absent only for runs stored by an
   * earlier server.
   */
  trace_id?: string;
}

export type RunEventType =
  | 'agent_started' | 'agent_completed' | 'agent_failed'
  | 'group_completed' | 'run_cancelled' | 'run_failed';

/** RunEvent: one frame of GET /runs/{id}/stream. */
export interface RunEvent {
  seq: number;
  type: RunEventType | string;
  run_id: string;
  agent: string | null;
  task_id: string | null;
  error: string | null;
  timestamp: string;
}

export type RuntimeEventType =
  | 'agent_spawned' | 'agent_dispatched' | 'agent_completed' | 'agent_failed'
  | 'tool_call_started' | 'tool_call_completed' | 'tool_call_failed'
  | 'budget_exceeded' | 'depth_limit_exceeded' | 'batch_started' | 'batch_completed'
  | 'group_started' | 'group_completed' | 'worker_started' | 'worker_stopped' | 'worker_heartbeat';

/** RuntimeEvent: one frame of GET /events/stream (payload keys depend on event_type; see openapi.json). */
export interface RuntimeEvent {
  event_type: RuntimeEventType;
  timestamp: string;
  agent_name: string;
  task_id: string | null;
  trace_id: string;
  parent_trace_id: string | null;
  span_id?: string;
  parent_span_id?: string;
  payload: Record<string, JSONValue>;
}

/** RunPage: GET /runs. */
export interface RunPage {
  runs: Array<{
    run_id: string;
    target: string;
    kind: string;
    state: RunState | string;
    progress: RunProgress | null;
    reason?: string;
    /** The run's trace id (RunStatus.trace_id). */
    trace_id?: string;
    created_at: string;
    updated_at: string;
  }> | null;
  /** Pass as cursor for the next page; absent on the last. */
  next_cursor?: string;
}

export interface UsageRow {
  tokens_used: number;
  /** Sum of agent_completed cost_usd, in US dollars (events without one count 0). */
  cost_usd: number;
  invocations: number;
}

/** Usage: GET /usage. */
export interface Usage {
  group_by: string;
  total: UsageRow;
  groups?: Record<string, UsageRow>;
}

/** ToolDescriptor: one row of GET /tools. */
export interface ToolDescriptor {
  name: string;
  description: string;
  input_schema: JSONValue;
  access: string;
  source: string;
  server?: string;
  agents: string[] | null;
}

/** RuntimeStats: GET /runtime/stats (the main keys; see openapi.json for all). */
export interface RuntimeStats {
  generated_at: string;
  header: {
    events: number;
    traces: number;
    agents_spawned: number;
    agents_completed: number;
    agents_failed: number;
    error_rate: number;
    tokens_used: number;
    tool_calls: number;
    tool_failures: number;
  };
  burn_rate: { window_seconds: number; tokens: number; tokens_per_minute: number };
  rejections?: Record<string, number>;
  error_groups: Array<{ error: string; count: number; last_seen: string; sample: string; agents: string[] | null }> | null;
  stuck?: { count: number; calls: Array<Record<string, JSONValue>> };
  token_budget?: { limit: number; used: number; reserved: number; remaining: number };
  [key: string]: unknown;
}

/** Problem: the body of every error answer (application/problem+json). */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The error kind, e.g. "RegistryError". */
  error: string;
  message: string;
  request_id: string;
  agent?: string;
  task_id?: string;
  reason?: string;
}

/** Options of every call. */
export interface CallOptions {
  /** Aborts the call (combined with the client's timeout). */
  signal?: AbortSignal;
  /** This call's timeout in ms, instead of the client's (0: none). */
  timeoutMs?: number;
  /** Sent as X-Request-Id: the run's trace id unless the task names one. */
  requestId?: string;
}

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <token>` (svc serve --auth-token). */
  token?: string;
  /** Bound on each request in ms (default 30000; 0: none). For streams, on the wait for the answer's headers. */
  timeoutMs?: number;
  /** The fetch to use (default: globalThis.fetch). */
  fetch?: typeof fetch;
}

export const DEFAULT_TIMEOUT_MS: 30000;

export class Client {
  constructor(baseURL: string, options?: ClientOptions);
  run(agent: string, task: TaskSpec, options?: CallOptions): Promise<AgentResult>;
  gather(agent: string, tasks: TaskSpec[], options?: CallOptions & { maxConcurrency?: number }): Promise<AgentResult[]>;
  runGroup(group: string, task: TaskSpec, options?: CallOptions): Promise<RunResult>;
  listAgents(options?: CallOptions): Promise<string[]>;
  listGroups(options?: CallOptions): Promise<string[]>;
  submit(target: string, task: TaskSpec, options?: CallOptions & { kind?: 'agent' | 'group'; idempotencyKey?: string }): Promise<RunHandle>;
  runHandle(runId: string): RunHandle;
  runStatus(runId: string, options?: CallOptions): Promise<RunStatus>;
  runResult(runId: string, options?: CallOptions): Promise<RunResult>;
  cancelRun(runId: string, options?: CallOptions): Promise<void>;
  runEvents(runId: string, options?: { signal?: AbortSignal; lastEventId?: number | string; timeoutMs?: number }): AsyncGenerator<RunEvent, void, undefined>;
  streamEvents(options?: { eventTypes?: RuntimeEventType | RuntimeEventType[]; agent?: string; signal?: AbortSignal; timeoutMs?: number }): AsyncGenerator<RuntimeEvent, void, undefined>;
  usage(groupBy?: 'agent' | 'model' | 'trace' | 'none', options?: CallOptions): Promise<Usage>;
  runtimeStats(options?: CallOptions): Promise<RuntimeStats>;
  listTools(options?: CallOptions): Promise<ToolDescriptor[]>;
  listRuns(options?: CallOptions & { state?: RunState; limit?: number; cursor?: string }): Promise<RunPage>;
}

/** A submitted run. */
export class RunHandle {
  constructor(client: Client, runId: string);
  readonly runId: string;
  status(options?: CallOptions): Promise<RunStatus>;
  /** Waits for the end; RunStateError for a cancelled run. */
  result(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<RunResult>;
  cancel(options?: CallOptions): Promise<void>;
  events(options?: { signal?: AbortSignal; lastEventId?: number | string; timeoutMs?: number }): AsyncGenerator<RunEvent, void, undefined>;
}

/** The base of every error an svc server answers with. */
export class SvcError extends Error {
  constructor(message: string, info?: { status?: number; kind?: string; detail?: string; requestId?: string; problem?: Problem | null });
  /** HTTP status of the answer. */
  readonly status: number;
  /** The problem body's `error`: the kind's wire name. */
  readonly kind: string;
  readonly detail: string;
  readonly requestId: string;
  readonly problem: Problem | null;
}
export class AgentRuntimeError extends SvcError {}
export class SpecValidationError extends AgentRuntimeError {}
export class TopologyError extends SpecValidationError {}
export class PayloadTooLargeError extends SpecValidationError {}
export class UnsupportedMediaTypeError extends SpecValidationError {}
export class ForbiddenOriginError extends AgentRuntimeError {}
export class UnauthorizedError extends AgentRuntimeError {}
export class TrustViolationError extends AgentRuntimeError {}
export class RegistryError extends AgentRuntimeError {}
export class NotFoundError extends AgentRuntimeError {}
export class MethodNotAllowedError extends AgentRuntimeError {}
export class RunStateError extends AgentRuntimeError {}
export class CancelledError extends AgentRuntimeError {}
export class BudgetExceededError extends AgentRuntimeError {}
export class DepthLimitError extends AgentRuntimeError {}
export class SpawnCycleError extends AgentRuntimeError {}
export class SpawnError extends AgentRuntimeError {}
export class ToolExecutionError extends AgentRuntimeError {}
export class AllAgentsFailedError extends AgentRuntimeError {}
export class OutputValidationError extends AgentRuntimeError {}
export class ConditionError extends AgentRuntimeError {}
export class BadRequestError extends SpecValidationError {}
export class HeaderTooLargeError extends SpecValidationError {}
export class RequestTimeoutError extends AgentRuntimeError {}
export class MisdirectedRequestError extends AgentRuntimeError {}
export class OverloadedError extends AgentRuntimeError {}
export class ModelError extends AgentRuntimeError {}
export class ShuttingDownError extends AgentRuntimeError {}
/** The server's 504: the run exceeded its timeout_seconds (a client-side timeout is a DOMException named TimeoutError). */
export class TimeoutError extends AgentRuntimeError {}

/** Every error class by its kind's wire name. */
export const errorKinds: Readonly<Record<string, typeof SvcError>>;

/** Rebuilds the error of an answer that is not 2xx from its problem body. */
export function errorFromResponse(res: Response): Promise<SvcError>;
