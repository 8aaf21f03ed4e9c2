// The client of the svc HTTP API (docs/api.md, docs/openapi.json): plain
// ES modules with no dependency beyond the platform's fetch, typed by
// index.d.ts (written from the OpenAPI schemas).

import { AgentRuntimeError, errorFromResponse } from './errors.js';
import { readSSE } from './sse.js';

export * from './errors.js';

/** The default bound on one request, in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 30_000;

// Result's polling backoff, as the Go client's (http/client/runs.go):
// quick for short runs, at most two requests a second for long ones.
const POLL_START_MS = 20;
const POLL_MAX_MS = 500;

// How often events() reconnects after the stream broke before its end.
const STREAM_RETRIES = 5;
const STREAM_RETRY_DELAY_MS = 100;

const TERMINAL_STATES = new Set(['completed', 'failed', 'cancelled']);

export class Client {
  #base;
  #token;
  #timeoutMs;
  #fetch;

  /**
   * @param {string} baseURL the server, e.g. "http://127.0.0.1:8420" (a path prefix is kept)
   * @param {{token?: string, timeoutMs?: number, fetch?: typeof fetch}} [options]
   */
  constructor(baseURL, { token, timeoutMs = DEFAULT_TIMEOUT_MS, fetch: fetchImpl } = {}) {
    if (typeof baseURL !== 'string' || baseURL === '') throw new TypeError('Client: baseURL is required');
    this.#base = baseURL.replace(/\/+$/, '');
    this.#token = token ?? '';
    if (!(Number.isFinite(timeoutMs) && timeoutMs >= 0)) throw new TypeError(`Client: timeoutMs ${timeoutMs}: want a number >= 0 (0: no timeout)`);
    this.#timeoutMs = timeoutMs;
    this.#fetch = fetchImpl ?? globalThis.fetch;
    if (typeof this.#fetch !== 'function') throw new TypeError('Client: no fetch: pass options.fetch');
  }

  /** Runs one agent and waits for its AgentResult. */
  run(agent, task, opts = {}) {
    return this.#json('POST', `/agents/${enc(agent)}/run`, { ...opts, body: task });
  }

  /** Runs one task per element of tasks on one agent; results in task order. */
  gather(agent, tasks, { maxConcurrency, ...opts } = {}) {
    const body = { tasks };
    if (maxConcurrency !== undefined) body.max_concurrency = maxConcurrency;
    return this.#json('POST', `/agents/${enc(agent)}/gather`, { ...opts, body });
  }

  /** Runs a group: an AgentResult (one terminal fired) or a GroupResult (several). */
  runGroup(group, task, opts = {}) {
    return this.#json('POST', `/groups/${enc(group)}/run`, { ...opts, body: task });
  }

  /** The registered agents' names, sorted. */
  listAgents(opts = {}) {
    return this.#json('GET', '/agents', opts);
  }

  /** The registered groups' names, sorted. */
  listGroups(opts = {}) {
    return this.#json('GET', '/groups', opts);
  }

  /**
   * Submits a run and returns its handle at once (202).
   * @returns {Promise<RunHandle>}
   */
  async submit(target, task, { kind, idempotencyKey, ...opts } = {}) {
    const body = { target, task };
    if (kind !== undefined) body.kind = kind;
    const headers = {};
    if (idempotencyKey !== undefined) headers['Idempotency-Key'] = idempotencyKey;
    const reply = await this.#json('POST', '/submit', { ...opts, body, headers });
    return new RunHandle(this, reply.run_id);
  }

  /** A handle on a run submitted before (by this client or another). */
  runHandle(runId) {
    return new RunHandle(this, runId);
  }

  /** GET /runs/{id}/status. */
  runStatus(runId, opts = {}) {
    return this.#json('GET', `/runs/${enc(runId)}/status`, opts);
  }

  /** GET /runs/{id}/result: the stored result; RunStateError (409) before the end or for a cancelled run. */
  runResult(runId, opts = {}) {
    return this.#json('GET', `/runs/${enc(runId)}/result`, opts);
  }

  /** POST /runs/{id}/cancel: idempotent; RegistryError for an unknown run. */
  async cancelRun(runId, opts = {}) {
    const res = await this.#request('POST', `/runs/${enc(runId)}/cancel`, opts);
    await res.body?.cancel();
  }

  /**
   * Runs one agent answering as an event stream (Accept: text/event-stream):
   * yields {type: 'delta', agent, task_id, span_id, index, text} for each
   * fragment of the answer as the model streams it, then {type: 'result',
   * result} with the AgentResult. A run that fails before it has a result
   * throws the error run() would have thrown. Breaking the loop early ends
   * the connection, which cancels the run.
   */
  async *runStream(agent, task, { signal, timeoutMs } = {}) {
    const frames = await this.#openStream(`/agents/${enc(agent)}/run`, {
      signal, timeoutMs, method: 'POST', body: task, headers: { Accept: 'text/event-stream, application/problem+json' },
    });
    for await (const f of frames) {
      if (f.event === 'delta') {
        yield { type: 'delta', ...JSON.parse(f.data) };
      } else if (f.event === 'result') {
        yield { type: 'result', result: JSON.parse(f.data) };
        return;
      } else if (f.event === 'error') {
        const status = Number(JSON.parse(f.data)?.status) || 500;
        throw await errorFromResponse(new Response(f.data, { status, headers: { 'Content-Type': 'application/problem+json' } }));
      }
    }
    throw new AgentRuntimeError('AgentRuntimeError: the run\'s event stream ended without a result', {
      status: 0, kind: 'AgentRuntimeError', detail: 'the run\'s event stream ended without a result',
    });
  }

  /**
   * The run's events (history, then live), ending after its terminal event.
   * Resumes with Last-Event-ID when the connection breaks. With deltas:
   * true, the run's deltas ({type: 'delta', seq: 0, text}) come too while
   * it executes; they are not stored, so a resumed stream does not repeat
   * them.
   */
  async *runEvents(runId, { signal, lastEventId, timeoutMs, deltas } = {}) {
    const query = deltas ? { deltas: 'true' } : undefined;
    let after = lastEventId === undefined || lastEventId === null ? null : String(lastEventId);
    let failures = 0;
    for (;;) {
      const headers = { Accept: 'text/event-stream' };
      if (after !== null) headers['Last-Event-ID'] = after;
      let frames;
      try {
        frames = await this.#openStream(`/runs/${enc(runId)}/stream`, { signal, headers, timeoutMs, query });
      } catch (err) {
        if (!retriable(err, signal) || ++failures > STREAM_RETRIES) throw err;
        await sleep(STREAM_RETRY_DELAY_MS * failures, signal);
        continue;
      }
      try {
        for await (const f of frames) {
          if (f.data === '') continue;
          const ev = JSON.parse(f.data);
          if (f.id !== undefined) after = f.id;
          failures = 0;
          yield ev;
        }
        return; // the server ended the stream: the run is over
      } catch (err) {
        if (!retriable(err, signal) || ++failures > STREAM_RETRIES) throw err;
        await sleep(STREAM_RETRY_DELAY_MS * failures, signal);
      }
    }
  }

  /**
   * The runtime's events as they happen (GET /events/stream), until signal
   * aborts or the loop breaks.
   */
  async *streamEvents({ eventTypes, agent, signal, timeoutMs } = {}) {
    const query = {};
    if (eventTypes !== undefined) query.event_type = [].concat(eventTypes).join(',');
    if (agent !== undefined) query.agent = agent;
    const frames = await this.#openStream('/events/stream', { signal, query, timeoutMs, headers: { Accept: 'text/event-stream' } });
    for await (const f of frames) {
      if (f.data === '') continue;
      yield JSON.parse(f.data);
    }
  }

  /** GET /usage: tokens in total and per agent (default), model, trace or none. */
  usage(groupBy, opts = {}) {
    return this.#json('GET', '/usage', { ...opts, query: groupBy === undefined ? {} : { group_by: groupBy } });
  }

  /** GET /runtime/stats. */
  runtimeStats(opts = {}) {
    return this.#json('GET', '/runtime/stats', opts);
  }

  /** GET /tools: the tool catalogue. */
  listTools(opts = {}) {
    return this.#json('GET', '/tools', opts);
  }

  /** GET /runs: submitted runs, newest first, paged by next_cursor. */
  listRuns({ state, limit, cursor, ...opts } = {}) {
    const query = {};
    if (state !== undefined) query.state = state;
    if (limit !== undefined) query.limit = String(limit);
    if (cursor !== undefined) query.cursor = cursor;
    return this.#json('GET', '/runs', { ...opts, query });
  }

  // --- plumbing ---

  #url(path, query) {
    const qs = new URLSearchParams(query ?? {}).toString();
    return this.#base + path + (qs ? `?${qs}` : '');
  }

  #headers(extra, hasBody) {
    const h = { Accept: 'application/json', ...extra };
    if (hasBody) h['Content-Type'] = 'application/json';
    if (this.#token) h.Authorization = `Bearer ${this.#token}`;
    return h;
  }

  // The signal of one request: the caller's, combined with the timeout.
  #signal(signal, timeoutMs) {
    const t = timeoutMs ?? this.#timeoutMs;
    const signals = [];
    if (signal) signals.push(signal);
    if (t > 0) signals.push(AbortSignal.timeout(t));
    if (signals.length === 0) return undefined;
    return signals.length === 1 ? signals[0] : anySignal(signals);
  }

  async #request(method, path, { body, query, headers, signal, timeoutMs, requestId } = {}) {
    const hasBody = body !== undefined;
    const h = this.#headers(headers, hasBody);
    if (requestId !== undefined) h['X-Request-Id'] = requestId;
    const res = await this.#fetch(this.#url(path, query), {
      method,
      headers: h,
      body: hasBody ? JSON.stringify(body) : undefined,
      signal: this.#signal(signal, timeoutMs),
    });
    if (!res.ok) throw await errorFromResponse(res);
    return res;
  }

  async #json(method, path, opts) {
    const res = await this.#request(method, path, opts);
    return res.json();
  }

  // Opens an event stream. The timeout bounds the wait for the answer's
  // headers only: a stream may rightly stay open far longer. The caller's
  // signal ends it whenever it aborts.
  async #openStream(path, { signal, query, headers, timeoutMs, method = 'GET', body }) {
    signal?.throwIfAborted();
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const t = timeoutMs ?? this.#timeoutMs;
    const timer = t > 0 ? setTimeout(() => ac.abort(new DOMException(`no answer within ${t} ms`, 'TimeoutError')), t) : null;
    const done = () => signal?.removeEventListener('abort', onAbort);
    let res;
    try {
      const hasBody = body !== undefined;
      res = await this.#fetch(this.#url(path, query), {
        method, headers: this.#headers(headers, hasBody), body: hasBody ? JSON.stringify(body) : undefined, signal: ac.signal,
      });
      if (!res.ok) throw await errorFromResponse(res);
    } catch (err) {
      done();
      throw ac.signal.aborted ? ac.signal.reason : err;
    } finally {
      if (timer !== null) clearTimeout(timer);
    }
    return (async function* frames() {
      try {
        yield* readSSE(res.body, ac.signal);
      } catch (err) {
        throw ac.signal.aborted ? ac.signal.reason : err;
      } finally {
        done();
        ac.abort(); // ends the connection when the loop stops early
      }
    })();
  }
}

/** A submitted run. */
export class RunHandle {
  #client;

  constructor(client, runId) {
    this.#client = client;
    /** The run's id (UUIDv7). */
    this.runId = runId;
  }

  /** The run's state and progress. */
  status(opts = {}) {
    return this.#client.runStatus(this.runId, opts);
  }

  /**
   * Waits until the run is terminal (polling its status, 20 ms doubling to
   * 500 ms), then returns its AgentResult or GroupResult. A cancelled run
   * has none: RunStateError.
   */
  async result({ signal, timeoutMs } = {}) {
    let delay = POLL_START_MS;
    for (;;) {
      const st = await this.#client.runStatus(this.runId, { signal, timeoutMs });
      if (TERMINAL_STATES.has(st.state)) return this.#client.runResult(this.runId, { signal, timeoutMs });
      await sleep(delay, signal);
      delay = Math.min(2 * delay, POLL_MAX_MS);
    }
  }

  /** Cancels the run (idempotent). */
  cancel(opts = {}) {
    return this.#client.cancelRun(this.runId, opts);
  }

  /** The run's events as an async iterator; see Client.runEvents. */
  events(opts = {}) {
    return this.#client.runEvents(this.runId, opts);
  }
}

// AbortSignal.any where the platform has it (node >= 20.3); on node 18
// (Debian 12's nodejs) the same by hand.
function anySignal(signals) {
  if (typeof AbortSignal.any === 'function') return AbortSignal.any(signals);
  const ac = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener('abort', () => ac.abort(s.reason), { once: true, signal: ac.signal });
  }
  return ac.signal;
}

function enc(s) {
  if (typeof s !== 'string' || s === '') throw new TypeError(`name ${JSON.stringify(s)}: want a non-empty string`);
  return encodeURIComponent(s);
}

// A broken connection is worth a retry; an abort, a timeout or an error
// the server answered with is not.
function retriable(err, signal) {
  if (signal?.aborted) return false;
  if (err?.name === 'AbortError' || err?.name === 'TimeoutError') return false;
  if (err && typeof err.status === 'number' && err.status > 0) return false; // an SvcError
  return err instanceof TypeError || err?.code === 'ECONNRESET' || err?.cause !== undefined;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
