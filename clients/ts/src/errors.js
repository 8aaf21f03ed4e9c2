// Errors rebuilt from the server's problem+json bodies (RFC 9457). The
// `error` field names the kind; each kind is a class here, with the same
// hierarchy as the server's (svc.Kind.Parent): TopologyError,
// PayloadTooLargeError, UnsupportedMediaTypeError, BadRequestError and
// HeaderTooLargeError are SpecValidationErrors, every other kind is an AgentRuntimeError, and all
// are SvcErrors. A kind this client does not know becomes an
// AgentRuntimeError whose `kind` still names it.

/** The base of every error an svc server answers with. */
export class SvcError extends Error {
  /**
   * @param {string} message
   * @param {{status?: number, kind?: string, detail?: string, requestId?: string, problem?: object}} [info]
   */
  constructor(message, info = {}) {
    super(message);
    this.name = new.target.name;
    /** HTTP status of the answer. */
    this.status = info.status ?? 0;
    /** The error kind, the problem body's `error` field (e.g. "RegistryError"). */
    this.kind = info.kind ?? new.target.name;
    /** The problem body's `detail`. */
    this.detail = info.detail ?? message;
    /** The trace id of the request (`request_id`, or the X-Request-Id header). */
    this.requestId = info.requestId ?? '';
    /** The whole problem body, as sent. */
    this.problem = info.problem ?? null;
  }
}

/** The base kind of the runtime's errors ("AgentRuntimeError"). */
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
/** The server's TimeoutError (504): the run exceeded its timeout_seconds. */
export class TimeoutError extends AgentRuntimeError {}
/**
 * The server's 409 for a sync run, gather or group run whose agent called
 * a tool that needs a person's approval (or ask_human): only a submitted
 * run can wait; submit it and answer with resumeRun.
 */
export class ApprovalRequiredError extends AgentRuntimeError {}
/** The server's 403 for an API key without the scope the route needs. */
export class ForbiddenError extends AgentRuntimeError {}

/** Every kind the client knows, by its wire name. */
export const errorKinds = Object.freeze({
  AgentRuntimeError,
  SpecValidationError,
  TopologyError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
  ForbiddenOriginError,
  UnauthorizedError,
  TrustViolationError,
  RegistryError,
  NotFoundError,
  MethodNotAllowedError,
  RunStateError,
  CancelledError,
  BudgetExceededError,
  DepthLimitError,
  SpawnCycleError,
  SpawnError,
  ToolExecutionError,
  AllAgentsFailedError,
  OutputValidationError,
  ConditionError,
  BadRequestError,
  HeaderTooLargeError,
  RequestTimeoutError,
  MisdirectedRequestError,
  OverloadedError,
  ContextError,
  SpawnCapError,
  ModelError,
  ShuttingDownError,
  TimeoutError,
  ApprovalRequiredError,
  ForbiddenError,
});

/**
 * Rebuilds the error of an answer that is not 2xx.
 * @param {Response} res
 * @returns {Promise<SvcError>}
 */
export async function errorFromResponse(res) {
  const text = await res.text().catch(() => '');
  let problem = null;
  try {
    problem = JSON.parse(text);
  } catch {
    // Not JSON (a proxy's page, an empty body): the status says it all.
  }
  const headerId = res.headers.get('x-request-id') ?? '';
  if (problem === null || typeof problem !== 'object' || Array.isArray(problem)) {
    const detail = text.trim() || res.statusText || `HTTP ${res.status}`;
    return new AgentRuntimeError(`HTTP ${res.status}: ${detail}`, {
      status: res.status, kind: 'AgentRuntimeError', detail, requestId: headerId,
    });
  }
  const kind = typeof problem.error === 'string' && problem.error ? problem.error : 'AgentRuntimeError';
  const Cls = Object.hasOwn(errorKinds, kind) ? errorKinds[kind] : AgentRuntimeError;
  const detail = problem.detail ?? problem.message ?? '';
  return new Cls(`${kind}: ${detail}`, {
    status: problem.status ?? res.status,
    kind,
    detail,
    requestId: problem.request_id || headerId,
    problem,
  });
}
