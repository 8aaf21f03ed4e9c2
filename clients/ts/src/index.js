// The client of the svc HTTP API (docs/api.md, docs/openapi.json): plain
// ES modules with no dependency beyond the platform's fetch, typed by
// index.d.ts (written from the OpenAPI schemas).

import { AgentRuntimeError, errorFromResponse, errorKinds } from './errors.js';
import { readLines } from './ndjson.js';
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

// streamEvents' reconnects: failed attempts in a row before it gives up,
// and the wait before each, doubling from the first to the last (about
// 25 s in all: a server's restart fits in it).
const EVENTS_RETRIES = 10;
const EVENTS_RETRY_FIRST_MS = 100;
const EVENTS_RETRY_MAX_MS = 5_000;
/** How long GET /events/stream may stay silent before streamEvents reconnects (the server pings every 15 s). */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

// The streamed gather's request body goes out in chunks of about this
// many bytes; tasks an async source has not produced yet wait for no
// company (see taskBody).
const GATHER_CHUNK_BYTES = 32 << 10;

const TERMINAL_STATES = new Set(['completed', 'failed', 'cancelled']);

/**
 * windowQuery is the since and until of a windowed route: a Date, an RFC
 * 3339 string, Unix milliseconds, or a duration before now ('1h', '90m').
 */
function windowQuery(since, until) {
  const query = {};
  const wire = (v) => (v instanceof Date ? v.toISOString() : String(v));
  if (since !== undefined && since !== null) query.since = wire(since);
  if (until !== undefined && until !== null) query.until = wire(until);
  return query;
}

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

  /**
   * The streamed gather: runs one task per element of tasks (any iterable
   * or async iterable of TaskSpec, read only as the server takes them) and
   * yields {index, result} for each as it finishes, index being the task's
   * place in tasks. The tasks go up as an NDJSON body while the results
   * come down on the same request, so neither side holds the batch: a
   * million tasks take no more memory than a hundred. A task that is not
   * JSON (a BigInt, a cycle) fails alone, with a SpecValidationError in its
   * result. The generator's return value is the batch's summary; a stream
   * that ends without one, or with one reporting an error, throws.
   * Breaking the loop, or the signal, ends the request, which cancels the
   * tasks still running; an error thrown by tasks ends it too, and is
   * rethrown. timeoutMs bounds the wait for the answer's headers only.
   */
  async *gatherStream(agent, tasks, { maxConcurrency, signal, timeoutMs, requestId } = {}) {
    const path = `/agents/${enc(agent)}/gather`;
    const source = iteratorOf(tasks);
    const query = maxConcurrency === undefined ? undefined : { max_concurrency: String(maxConcurrency) };
    const invalid = new Map(); // index -> why the task was sent as null
    let sourceError = null;
    const ac = new AbortController();
    const body = taskBody(source, invalid, (err) => {
      sourceError = err;
      ac.abort(err);
    });
    const headers = { 'Content-Type': 'application/x-ndjson', Accept: 'application/x-ndjson, application/problem+json' };
    if (requestId !== undefined) headers['X-Request-Id'] = requestId;
    const lines = await this.#openStream(path, { signal, query, timeoutMs, method: 'POST', headers, rawBody: body.stream, read: readLines, ac })
      .catch(async (err) => {
        body.stop();
        if (sourceError) throw sourceError;
        // The server may refuse the batch (an unknown agent, a spent
        // budget) without reading the body and close the connection; node's
        // fetch, still writing tasks, then fails with the reset and drops
        // the answer. Asking again with no tasks gets the refusal itself.
        if (err instanceof TypeError && !ac.signal.aborted) throw (await this.#refusal(path, query, headers, signal, timeoutMs)) ?? err;
        throw err;
      });
    try {
      for await (const line of lines) {
        let l;
        try {
          l = JSON.parse(line);
        } catch (err) {
          throw runtimeError(`a line of the gather stream is not JSON (${err.message}): ${line.slice(0, 80)}`);
        }
        if (l?.summary) {
          if (l.summary.error) throw errorFromInfo(l.summary.error);
          return l.summary;
        }
        if (!Number.isInteger(l?.index) || !l.result) {
          throw runtimeError(`a line of the gather stream is neither a result nor the summary: ${line.slice(0, 80)}`);
        }
        const why = invalid.get(l.index);
        if (why !== undefined) {
          invalid.delete(l.index);
          l.result.error = { type: 'SpecValidationError', message: why };
        }
        yield { index: l.index, result: l.result };
      }
      throw runtimeError('the gather stream ended before its summary');
    } catch (err) {
      throw sourceError ?? err;
    } finally {
      await lines.return(); // ends the request when the loop stopped early
      body.stop();
    }
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

  /** GET /agents/{name}/schema: the JSON Schemas of an agent's input and output ({} is any value). */
  agentSchema(agent, opts = {}) {
    return this.#json('GET', `/agents/${enc(agent)}/schema`, opts);
  }

  /** GET /groups/{name}/topology: a group's nodes, edges (conditions as written), entry and terminal nodes, and a Mermaid flowchart. */
  groupTopology(group, opts = {}) {
    return this.#json('GET', `/groups/${enc(group)}/topology`, opts);
  }

  /** GET /healthz: {status: 'ok'} while the server's process lives (no token needed). */
  health(opts = {}) {
    return this.#json('GET', '/healthz', opts);
  }

  /**
   * Submits a run and returns its handle at once (202).
   * @returns {Promise<RunHandle>}
   */
  async submit(target, task, { kind, idempotencyKey, callbackUrl, ...opts } = {}) {
    const body = { target, task };
    if (kind !== undefined) body.kind = kind;
    if (callbackUrl !== undefined) body.callback_url = callbackUrl;
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
   * POST /runs/{id}/resume: answers one request of a waiting run (its
   * status lists them under `waiting`, its stream's run_waiting event
   * carries one) and starts the run again; returns the run's status (202).
   * An approval takes `approve` (true or false, with an optional `reason`
   * the model sees with a denial), a question (ask_human) takes `answer`,
   * any JSON value (null included). A run that is not waiting, or a request
   * that is unknown or already answered, is a RunStateError (409); a
   * decision that does not fit its request a SpecValidationError (400).
   * requestId here names the waiting request: this call sends no
   * X-Request-Id of its own.
   */
  resumeRun(runId, { requestId, approve, reason, answer, ...opts } = {}) {
    const path = `/runs/${enc(runId)}/resume`;
    if (typeof requestId !== 'string' || requestId === '') {
      throw new TypeError(`resumeRun: requestId ${JSON.stringify(requestId)}: want the id of one of the run's waiting requests (its status lists them under waiting)`);
    }
    const body = { request_id: requestId };
    if (approve !== undefined) body.approve = approve;
    if (reason !== undefined) body.reason = reason;
    // null is an answer: only a missing one is left out.
    if (answer !== undefined) body.answer = answer;
    return this.#json('POST', path, { ...opts, body });
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
   * aborts or the loop breaks. The stream is live only: when the
   * connection drops (the server restarts, a proxy cuts it, or nothing,
   * not even its 15 s ping, came for idleTimeoutMs), it reconnects, waiting
   * 100 ms doubling to 5 s, and goes on with the events from then on
   * (those of the gap are not sent again: the server keeps no history for
   * this stream; GET /events has them). It gives up after 10 failed
   * attempts to connect in a row, throwing the last error; an error the server
   * answers (a bad filter, a wrong token) is thrown at once. onReconnect
   * ({attempt, error}) is called before each wait; reconnect: false ends
   * the iteration when the server ends the stream and throws when it
   * breaks. A frame that is not a RuntimeEvent is skipped.
   */
  async *streamEvents({ eventTypes, agent, signal, timeoutMs, reconnect = true, idleTimeoutMs = DEFAULT_IDLE_TIMEOUT_MS, onReconnect } = {}) {
    const query = {};
    if (eventTypes !== undefined) query.event_type = [].concat(eventTypes).join(',');
    if (agent !== undefined) query.agent = agent;
    let failures = 0;
    for (;;) {
      let why;
      try {
        const frames = await this.#openStream('/events/stream', {
          signal, query, timeoutMs, idleTimeoutMs: reconnect ? idleTimeoutMs : 0, headers: { Accept: 'text/event-stream' },
        });
        failures = 0; // connected: the next drop starts the waits over, as svc status does
        for await (const f of frames) {
          let ev;
          try {
            ev = JSON.parse(f.data);
          } catch {
            continue;
          }
          if (typeof ev?.event_type !== 'string' || ev.event_type === '') continue;
          yield ev;
        }
        if (!reconnect) return;
        why = runtimeError('the server ended the event stream');
      } catch (err) {
        if (!reconnect || !retriable(err, signal)) throw err;
        why = err;
      }
      if (++failures > EVENTS_RETRIES) throw why;
      onReconnect?.({ attempt: failures, error: why });
      await sleep(Math.min(EVENTS_RETRY_FIRST_MS * 2 ** (failures - 1), EVENTS_RETRY_MAX_MS), signal);
    }
  }

  /** GET /usage: tokens in total and per agent (default), model, trace or none. */
  usage(groupBy, { since, until, ...opts } = {}) {
    const query = windowQuery(since, until);
    if (groupBy !== undefined) query.group_by = groupBy;
    return this.#json('GET', '/usage', { ...opts, query });
  }

  /** GET /tools?group_by=: calls, failures and latency percentiles per tool (or agent and tool), over since..until when given. */
  toolUsage(groupBy, { since, until, ...opts } = {}) {
    return this.#json('GET', '/tools', { ...opts, query: { ...windowQuery(since, until), group_by: groupBy } });
  }

  /** GET /runtime/stats; since and until window the event counts. */
  runtimeStats({ since, until, ...opts } = {}) {
    return this.#json('GET', '/runtime/stats', { ...opts, query: windowQuery(since, until) });
  }

  /** GET /tools: the tool catalogue. */
  listTools(opts = {}) {
    return this.#json('GET', '/tools', opts);
  }

  /**
   * GET /runs: the run history (every top-level run; with state, or type
   * 'submitted', the submitted runs alone), newest first, paged by
   * next_cursor, with the total.
   */
  listRuns({ state, status, target, type, limit, cursor, ...opts } = {}) {
    const query = {};
    if (state !== undefined) query.state = state;
    if (status !== undefined) query.status = status;
    if (target !== undefined) query.target = target;
    if (type !== undefined) query.type = type;
    if (limit !== undefined) query.limit = String(limit);
    if (cursor !== undefined) query.cursor = cursor;
    return this.#json('GET', '/runs', { ...opts, query });
  }

  /**
   * POST /batches: stores a batch of tasks (an iterable or async iterable
   * of TaskSpec, sent one a line as application/x-ndjson, any count) for
   * the agent target and returns {batch_id, total} once the server has
   * stored every task; the server runs it in the background, and it
   * survives a restart of a server with a persistent store. A task JSON
   * cannot encode fails as its own result. The upload is not bounded by
   * the client's timeout, only by timeoutMs when given.
   * @returns {Promise<BatchAccepted>}
   */
  async submitBatch(target, tasks, { maxConcurrency, mode, callbackUrl, signal, timeoutMs } = {}) {
    const source = iteratorOf(tasks);
    const query = { target };
    if (maxConcurrency !== undefined) query.max_concurrency = String(maxConcurrency);
    if (mode !== undefined) query.mode = mode;
    if (callbackUrl !== undefined) query.callback_url = callbackUrl;
    const headers = { 'Content-Type': 'application/x-ndjson' };
    let sourceError = null;
    const ac = new AbortController();
    const body = taskBody(source, new Map(), (err) => {
      sourceError = err;
      ac.abort(err);
    });
    const onAbort = () => ac.abort(signal.reason);
    signal?.throwIfAborted();
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = timeoutMs > 0 ? setTimeout(() => ac.abort(new DOMException(`no answer within ${timeoutMs} ms`, 'TimeoutError')), timeoutMs) : null;
    try {
      const res = await this.#fetch(this.#url('/batches', query), {
        method: 'POST', headers: this.#headers(headers, false), body: body.stream, duplex: 'half', redirect: 'error', signal: ac.signal,
      });
      if (!res.ok) throw await errorFromResponse(res);
      return await res.json();
    } catch (err) {
      if (sourceError) throw sourceError;
      if (ac.signal.aborted) throw ac.signal.reason;
      // A refusal (an unknown agent) comes before the body is read and
      // the connection closes under the upload: ask again without tasks
      // for the refusal itself.
      if (err instanceof TypeError) throw (await this.#refusal('/batches', query, headers, signal, timeoutMs)) ?? err;
      throw err;
    } finally {
      if (timer !== null) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      body.stop();
    }
  }

  /** GET /batches/{id}: state, counts, tokens and cost so far. */
  batchStatus(batchId, opts = {}) {
    return this.#json('GET', `/batches/${enc(batchId)}`, opts);
  }

  /** POST /batches/{id}/cancel: idempotent; its stored results stay. */
  async cancelBatch(batchId, opts = {}) {
    const res = await this.#request('POST', `/batches/${enc(batchId)}/cancel`, opts);
    await res.body?.cancel();
  }

  /** GET /batches: batches, newest first, paged by next_cursor. */
  listBatches({ limit, cursor, ...opts } = {}) {
    const query = {};
    if (limit !== undefined) query.limit = String(limit);
    if (cursor !== undefined) query.cursor = cursor;
    return this.#json('GET', '/batches', { ...opts, query });
  }

  /**
   * GET /batches/{id}/results: yields {index, seq, result} for each stored
   * result, by index (order 'index', the default; after is the last index
   * read) or in finish order (order 'finish'; after is the last seq read).
   * With follow: true it waits for the results to come until the batch
   * ends. timeoutMs bounds the wait for the answer's headers only.
   */
  async *batchResults(batchId, { order, after, follow, signal, timeoutMs } = {}) {
    const query = {};
    if (order !== undefined) query.order = order;
    if (after !== undefined && after !== null) query.after = String(after);
    if (follow) query.follow = 'true';
    const lines = await this.#openStream(`/batches/${enc(batchId)}/results`, {
      signal, query, timeoutMs, headers: { Accept: 'application/x-ndjson, application/problem+json' }, read: readLines,
    });
    for await (const line of lines) {
      let l;
      try {
        l = JSON.parse(line);
      } catch (err) {
        throw runtimeError(`a line of the batch results is not JSON (${err.message}): ${line.slice(0, 80)}`);
      }
      if (l?.error) throw errorFromInfo(l.error);
      yield { index: l.index, seq: l.seq, result: l.result };
    }
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

  // The error a server answers a streamed gather with when it has no
  // tasks: its refusal of the request, or null when it takes it (its empty
  // batch runs nothing) or cannot be reached.
  async #refusal(path, query, headers, signal, timeoutMs) {
    try {
      const res = await this.#fetch(this.#url(path, query), {
        method: 'POST', headers: this.#headers(headers, false), body: '', signal: this.#signal(signal, timeoutMs),
      });
      if (!res.ok) return await errorFromResponse(res);
      await res.body?.cancel();
    } catch {
      // unreachable now: the first error stands
    }
    return null;
  }

  // Opens a stream (server-sent events, or NDJSON with read: readLines).
  // The timeout bounds the wait for the answer's headers only: a stream
  // may rightly stay open far longer. The caller's signal ends it whenever
  // it aborts; so does idleTimeoutMs without a byte, with an error
  // retriable() takes. rawBody is sent as it is (a ReadableStream, both
  // ways at once); ac is the controller of the request, when the caller
  // must abort it too.
  async #openStream(path, { signal, query, headers, timeoutMs, idleTimeoutMs = 0, method = 'GET', body, rawBody, read = readSSE, ac = new AbortController() }) {
    signal?.throwIfAborted();
    const onAbort = () => ac.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const t = timeoutMs ?? this.#timeoutMs;
    const timer = t > 0 ? setTimeout(() => ac.abort(new DOMException(`no answer within ${t} ms`, 'TimeoutError')), t) : null;
    const done = () => signal?.removeEventListener('abort', onAbort);
    let res;
    try {
      const init = { method, headers: this.#headers(headers, body !== undefined), signal: ac.signal };
      if (rawBody !== undefined) {
        init.body = rawBody;
        init.duplex = 'half'; // what fetch calls a streamed body; node's sends and reads at once
        // Any other redirect mode makes fetch work on a clone of the
        // request (the spec's HTTP-network-or-cache fetch), whose body is a
        // tee of this one: the branch left unread keeps every chunk sent,
        // the whole batch. A streamed body cannot follow a redirect anyway.
        init.redirect = 'error';
      } else if (body !== undefined) {
        init.body = JSON.stringify(body);
      }
      res = await this.#fetch(this.#url(path, query), init);
      if (!res.ok) throw await errorFromResponse(res);
    } catch (err) {
      done();
      throw ac.signal.aborted ? ac.signal.reason : err;
    } finally {
      if (timer !== null) clearTimeout(timer);
    }
    // The idle timer checks when the last bytes came rather than being
    // reset by each chunk: cheaper, and timers have no refresh() outside
    // node.
    let idle = null;
    let last = Date.now();
    const onBytes = idleTimeoutMs > 0 ? () => { last = Date.now(); } : undefined;
    if (idleTimeoutMs > 0) {
      const arm = (ms) => {
        idle = setTimeout(() => {
          const quiet = Date.now() - last;
          if (quiet >= idleTimeoutMs) ac.abort(idleError(idleTimeoutMs));
          else arm(idleTimeoutMs - quiet);
        }, ms);
        idle.unref?.(); // the connection keeps the process alive, not this
      };
      arm(idleTimeoutMs);
      ac.signal.addEventListener('abort', () => clearTimeout(idle), { once: true });
    }
    return (async function* frames() {
      try {
        yield* read(res.body, ac.signal, onBytes);
      } catch (err) {
        throw ac.signal.aborted ? ac.signal.reason : err;
      } finally {
        if (idle !== null) clearTimeout(idle);
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
   * has none: RunStateError. A waiting run is not terminal: result() goes
   * on waiting until someone resumes it (bound the wait with signal).
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

  /**
   * Answers one of the run's open requests ({requestId, approve, reason}
   * or {requestId, answer}) and resumes it; see Client.resumeRun.
   */
  resume(decision = {}) {
    return this.#client.resumeRun(this.runId, decision);
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

// The iterator of a gatherStream's tasks: async when tasks can be awaited.
function iteratorOf(tasks) {
  if (tasks != null && typeof tasks[Symbol.asyncIterator] === 'function') return { it: tasks[Symbol.asyncIterator](), sync: false };
  if (tasks != null && typeof tasks[Symbol.iterator] === 'function' && typeof tasks !== 'string') return { it: tasks[Symbol.iterator](), sync: true };
  throw new TypeError('gatherStream: tasks must be an iterable or an async iterable of TaskSpec');
}

const WAIT = Symbol('wait');
const nextTurn = typeof setImmediate === 'function' ? (f) => setImmediate(f) : (f) => setTimeout(f, 0);

// The body of a streamed gather: one task a line, pulled from the source
// only when the connection takes more (highWaterMark 0), so a slow server
// slows the source instead of filling memory. Tasks that are ready go out
// together, up to GATHER_CHUNK_BYTES; a task an async source has not
// produced by the next turn of the event loop does not hold back those
// before it (it is awaited in the next pull). A task JSON cannot encode is
// sent as null, which the server fails as that task's result; invalid
// keeps why, for the client to say it instead. onError gets what the
// source threw. stop() ends the source (once), whoever holds the stream.
function taskBody({ it, sync }, invalid, onError) {
  const encoder = new TextEncoder();
  let index = 0;
  let pending = null; // an async next() a pull stopped waiting for
  let finished = false;
  const line = (task) => {
    let text;
    try {
      text = JSON.stringify(task);
    } catch (err) {
      invalid.set(index, `task ${index}: ${err.message}`);
    }
    if (text === undefined) {
      if (!invalid.has(index)) invalid.set(index, `task ${index}: ${typeof task} is not a JSON value`);
      text = 'null';
    }
    index++;
    return text + '\n';
  };
  const stop = () => {
    if (finished) return;
    finished = true;
    // Not awaited: an async source may be waiting on something that
    // never comes now; its return() runs when that next() settles.
    Promise.resolve().then(() => it.return?.()).catch(() => {});
  };
  const stream = new ReadableStream({
    async pull(ctrl) {
      if (finished) {
        ctrl.close(); // stopped while the request still reads: end the body
        return;
      }
      try {
        let chunk = '';
        let turn = null;
        for (;;) {
          let r;
          if (sync) {
            r = it.next();
          } else {
            const p = pending ?? it.next();
            pending = null;
            if (chunk === '') {
              r = await p;
            } else {
              turn ??= new Promise((resolve) => nextTurn(() => resolve(WAIT)));
              r = await Promise.race([p, turn]);
              if (r === WAIT) {
                pending = p;
                break;
              }
            }
          }
          if (r.done) {
            finished = true;
            if (chunk !== '') ctrl.enqueue(encoder.encode(chunk));
            ctrl.close();
            return;
          }
          chunk += line(r.value);
          if (chunk.length >= GATHER_CHUNK_BYTES) break;
        }
        ctrl.enqueue(encoder.encode(chunk));
      } catch (err) {
        finished = true;
        onError(err);
        ctrl.error(err);
      }
    },
    cancel: stop,
  }, { highWaterMark: 0 });
  return { stream, stop };
}

function runtimeError(detail) {
  return new AgentRuntimeError(`AgentRuntimeError: ${detail}`, { status: 0, kind: 'AgentRuntimeError', detail });
}

// The error an ErrorInfo ({type, message}) names, as in a gather's summary.
function errorFromInfo(info) {
  const kind = typeof info?.type === 'string' && info.type ? info.type : 'AgentRuntimeError';
  const Cls = Object.hasOwn(errorKinds, kind) ? errorKinds[kind] : AgentRuntimeError;
  const detail = info?.message ?? '';
  return new Cls(`${kind}: ${detail}`, { status: 0, kind, detail });
}

function idleError(ms) {
  const err = new Error(`the event stream was silent for ${ms} ms`);
  err.name = 'StreamIdleError';
  err.code = 'SVC_STREAM_IDLE';
  return err;
}

function enc(s) {
  if (typeof s !== 'string' || s === '') throw new TypeError(`name ${JSON.stringify(s)}: want a non-empty string`);
  return encodeURIComponent(s);
}

// A broken connection is worth a retry; an abort, a timeout or an error
// the server answered with is not.
function retriable(err, signal) {
  if (signal?.aborted) return false;
  if (err?.code === 'SVC_STREAM_IDLE') return true;
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
