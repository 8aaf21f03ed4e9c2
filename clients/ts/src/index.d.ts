// Types of the svc client. The wire types (what the server sends and
// accepts) are those of openapi.d.ts, generated from docs/openapi.json
// (`make ts-types`; test/types.test.js fails when it is stale); this file
// names them and declares the classes and functions of index.js, which
// test/types.test.js checks against what index.js exports.

import type { components } from './openapi.js';

type Schemas = components['schemas'];

/** Any JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** TaskSpec: one task for an agent or a group. */
export type TaskSpec = Schemas['TaskSpec'];
/** ErrorInfo: why a run failed (inside a 200 AgentResult). */
export type ErrorInfo = Schemas['ErrorInfo'];
/** AgentResult: the answer of one agent run. */
export type AgentResult = Schemas['AgentResult'];
export type AgentResultMetadata = AgentResult['metadata'];
/** GroupResult: a group run in which several terminal nodes fired. */
export type GroupResult = Schemas['GroupResult'];
export type GroupResultMetadata = GroupResult['metadata'];
/** RunResult: a group run's answer (or a submitted run's result). */
export type RunResult = Schemas['RunResult'];
/** StreamLine: one line of a streamed gather (a result, or the summary at the end). */
export type StreamLine = Schemas['StreamLine'];
export type GatherSummary = Schemas['GatherSummary'];
/** One result of Client.gatherStream: the task's place in the tasks given, and its result. */
export type GatherItem = { index: number; result: AgentResult };
/** AgentSchema: GET /agents/{name}/schema; `{}` is any value. */
export type AgentSchema = Schemas['AgentSchema'];
/** Topology: GET /groups/{name}/topology. */
export type Topology = Schemas['Topology'];
/** Health: GET /healthz. */
export type Health = Schemas['Health'];

/** The states a submitted run goes through (RunStatus.state); waiting: paused for a person (see Client.resumeRun). */
export type RunState = 'pending' | 'running' | 'waiting' | 'completed' | 'failed' | 'cancelled';
/** RunProgress: counts of a submitted run's agents. */
export type RunProgress = Schemas['RunProgress'];
/** RunStatus: GET /runs/{id}/status. */
export type RunStatus = Schemas['RunStatus'];
/** RunPage: GET /runs. */
export type RunPage = Schemas['RunPage'];

/** The states of a batch (BatchStatus.state). */
export type BatchState = 'queued' | 'running' | 'completed' | 'cancelled' | 'failed';
/** BatchAccepted: POST /batches's 202. */
export type BatchAccepted = Schemas['BatchAccepted'];
/** BatchStatus: GET /batches/{id}. */
export type BatchStatus = Schemas['BatchStatus'];
/** BatchPage: GET /batches. */
export type BatchPage = Schemas['BatchPage'];
/** One line of GET /batches/{id}/results. */
export type BatchResultLine = { index: number; seq: number; result: AgentResult };

export type RunEventType =
  | 'agent_started' | 'agent_completed' | 'agent_failed'
  | 'group_completed' | 'run_cancelled' | 'run_failed'
  | 'run_waiting' | 'run_resumed' | 'delta';
/** RunEvent: one frame of GET /runs/{id}/stream; a delta (type "delta", seq 0) has its fragment in text, a run_waiting event its WaitRequest in request. */
export type RunEvent = Schemas['RunEvent'];
/** WaitRequest: what a waiting run waits for (RunStatus.waiting, RunEvent.request): an approval of a tool call, or an answer to an ask_human question. */
export type WaitRequest = Schemas['WaitRequest'];
/** ResumeRequest: the body of POST /runs/{id}/resume, as the server takes it. */
export type ResumeRequest = Schemas['ResumeRequest'];
/**
 * The answer to one request of a waiting run (Client.resumeRun; requestId
 * is the WaitRequest's id, not a trace id): approve
 * or deny an approval (reason, optional, goes to the model with a denial),
 * or answer a question with any JSON value.
 */
export type ResumeDecision =
  | { requestId: string; approve: boolean; reason?: string; answer?: never }
  | { requestId: string; answer: JSONValue; approve?: never; reason?: never };

/** One event of Client.runStream: a fragment of the answer as the model streams it, then the result. */
export type RunStreamEvent =
  | { type: 'delta'; agent: string; task_id: string; span_id?: string; index: number; text: string }
  | { type: 'result'; result: AgentResult };

/** RuntimeEvent: one frame of GET /events/stream; its payload's keys depend on event_type. */
export type RuntimeEvent = Schemas['RuntimeEvent'];
export type RuntimeEventType = RuntimeEvent['event_type'];

/** Usage: GET /usage. */
export type Usage = Schemas['Usage'];
export type UsageRow = Usage['total'];
/** ToolDescriptor: one row of GET /tools. */
export type ToolDescriptor = Schemas['ToolDescriptor'];
/** ToolUsage: one row of GET /tools?group_by=tool or agent_tool. */
export type ToolUsage = Schemas['ToolUsage'];
/** RuntimeStats: GET /runtime/stats. */
export type RuntimeStats = Schemas['RuntimeStats'];
export type BudgetStatus = Schemas['BudgetStatus'];
/** Problem: the body of every error answer (application/problem+json). */
export type Problem = Schemas['Problem'];

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
/** How long GET /events/stream may stay silent before streamEvents reconnects. */
export const DEFAULT_IDLE_TIMEOUT_MS: 60000;

/** Options of Client.streamEvents. */
export type StreamEventsOptions = {
  eventTypes?: RuntimeEventType | RuntimeEventType[];
  agent?: string;
  signal?: AbortSignal;
  /** Bound on the wait for each connection's answer, in ms. */
  timeoutMs?: number;
  /** Reconnect when the connection drops (default true); false: the iteration ends with the stream. */
  reconnect?: boolean;
  /** Reconnect after this long without a byte, pings included (default 60000; 0: never). */
  idleTimeoutMs?: number;
  /** Called before each wait to reconnect; events in the gap are not sent again. */
  onReconnect?: (info: { attempt: number; error: unknown }) => void;
};

/** since and until of the windowed routes: a Date, an RFC 3339 string, Unix milliseconds, or a duration before now ('1h'). */
export type Window = { since?: Date | string | number; until?: Date | string | number };
/** A run history row's status (GET /runs?status=). */
export type HistoryStatus = 'spawned' | 'running' | 'waiting' | 'completed' | 'failed' | 'rejected' | 'cancelled';
/** How a run history row's request was made (GET /runs?type=). */
export type RunType = 'run' | 'gather' | 'group' | 'submitted';

export class Client {
  constructor(baseURL: string, options?: ClientOptions);
  run(agent: string, task: TaskSpec, options?: CallOptions): Promise<AgentResult>;
  gather(agent: string, tasks: TaskSpec[], options?: CallOptions & { maxConcurrency?: number }): Promise<AgentResult[]>;
  /** The streamed gather: tasks read as the server takes them, results as they finish; returns the batch's summary. */
  gatherStream(agent: string, tasks: Iterable<TaskSpec> | AsyncIterable<TaskSpec>, options?: CallOptions & { maxConcurrency?: number }): AsyncGenerator<GatherItem, GatherSummary, undefined>;
  runGroup(group: string, task: TaskSpec, options?: CallOptions): Promise<RunResult>;
  listAgents(options?: CallOptions): Promise<string[]>;
  listGroups(options?: CallOptions): Promise<string[]>;
  agentSchema(agent: string, options?: CallOptions): Promise<AgentSchema>;
  groupTopology(group: string, options?: CallOptions): Promise<Topology>;
  health(options?: CallOptions): Promise<Health>;
  /** callbackUrl: an http(s) URL that gets one signed POST when the run ends (docs/api.md, Webhooks). */
  submit(target: string, task: TaskSpec, options?: CallOptions & { kind?: 'agent' | 'group'; idempotencyKey?: string; callbackUrl?: string }): Promise<RunHandle>;
  runHandle(runId: string): RunHandle;
  runStatus(runId: string, options?: CallOptions): Promise<RunStatus>;
  runResult(runId: string, options?: CallOptions): Promise<RunResult>;
  cancelRun(runId: string, options?: CallOptions): Promise<void>;
  /** POST /runs/{id}/resume: answers one request of a waiting run and resumes it (202, the run's status); RunStateError (409) when the run is not waiting or the request is unknown or answered, SpecValidationError (400) for a decision that does not fit. */
  resumeRun(runId: string, decision: ResumeDecision & Omit<CallOptions, 'requestId'>): Promise<RunStatus>;
  /** Runs one agent answering as an event stream: its deltas, then its result; a failed run throws as run() does. */
  runStream(agent: string, task: TaskSpec, options?: { signal?: AbortSignal; timeoutMs?: number }): AsyncGenerator<RunStreamEvent, void, undefined>;
  runEvents(runId: string, options?: { signal?: AbortSignal; lastEventId?: number | string; timeoutMs?: number; deltas?: boolean }): AsyncGenerator<RunEvent, void, undefined>;
  /** GET /events/stream, reconnecting when the connection drops. */
  streamEvents(options?: StreamEventsOptions): AsyncGenerator<RuntimeEvent, void, undefined>;
  usage(groupBy?: 'agent' | 'model' | 'trace' | 'none', options?: CallOptions & Window): Promise<Usage>;
  /** GET /tools?group_by=: calls, failures and latency percentiles per tool, over the window when given. */
  toolUsage(groupBy: 'tool' | 'agent_tool', options?: CallOptions & Window): Promise<ToolUsage>;
  runtimeStats(options?: CallOptions & Window): Promise<RuntimeStats>;
  listTools(options?: CallOptions): Promise<ToolDescriptor[]>;
  /** The run history: every top-level run, or (state, or type 'submitted') the submitted runs alone. */
  listRuns(options?: CallOptions & { state?: RunState; status?: HistoryStatus; target?: string; type?: RunType; limit?: number; cursor?: string }): Promise<RunPage>;
  /** POST /batches: stores the tasks (sent as NDJSON) and returns once every one is stored. */
  submitBatch(target: string, tasks: Iterable<TaskSpec> | AsyncIterable<TaskSpec>, options?: { maxConcurrency?: number; mode?: 'runtime' | 'provider'; callbackUrl?: string; signal?: AbortSignal; timeoutMs?: number }): Promise<BatchAccepted>;
  batchStatus(batchId: string, options?: CallOptions): Promise<BatchStatus>;
  cancelBatch(batchId: string, options?: CallOptions): Promise<void>;
  listBatches(options?: CallOptions & { limit?: number; cursor?: string }): Promise<BatchPage>;
  /** GET /batches/{id}/results: by index (after: the last index read) or finish order (after: the last seq read); follow waits until the batch ends. */
  batchResults(batchId: string, options?: { order?: 'index' | 'finish'; after?: number; follow?: boolean; signal?: AbortSignal; timeoutMs?: number }): AsyncGenerator<BatchResultLine, void, undefined>;
}

/** A submitted run. */
export class RunHandle {
  constructor(client: Client, runId: string);
  readonly runId: string;
  status(options?: CallOptions): Promise<RunStatus>;
  /** Waits for the end (a waiting run: until it is resumed and ends); RunStateError for a cancelled run. */
  result(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<RunResult>;
  /** Answers one of the run's open requests and resumes it; see Client.resumeRun. */
  resume(decision: ResumeDecision & Omit<CallOptions, 'requestId'>): Promise<RunStatus>;
  cancel(options?: CallOptions): Promise<void>;
  events(options?: { signal?: AbortSignal; lastEventId?: number | string; timeoutMs?: number; deltas?: boolean }): AsyncGenerator<RunEvent, void, undefined>;
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
export class ContextError extends AgentRuntimeError {}
/** The server's 422: a spawn_agents call of the run asked for more agents than max_spawn_children. */
export class SpawnCapError extends AgentRuntimeError {}
export class ModelError extends AgentRuntimeError {}
export class ShuttingDownError extends AgentRuntimeError {}
/** The server's 504: the run exceeded its timeout_seconds (a client-side timeout is a DOMException named TimeoutError). */
export class TimeoutError extends AgentRuntimeError {}
/** The server's 409 for a sync run that reached a call needing a person's approval (or ask_human): submit the run and answer it with resumeRun. */
export class ApprovalRequiredError extends AgentRuntimeError {}
export class ForbiddenError extends AgentRuntimeError {}

/** Every error class by its kind's wire name. */
export const errorKinds: Readonly<Record<string, typeof SvcError>>;

/** Rebuilds the error of an answer that is not 2xx from its problem body. */
export function errorFromResponse(res: Response): Promise<SvcError>;
