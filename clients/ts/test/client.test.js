// The client against a real `svc serve` (test/server.js).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client, SvcError, AgentRuntimeError, RegistryError, SpecValidationError,
  RunStateError, UnauthorizedError, DEFAULT_TIMEOUT_MS,
} from '../src/index.js';
import { startServer } from '../support/server.js';

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client(srv.url);
});

after(async () => {
  await srv?.stop();
});

// Waits for cond() to hold, up to limitMs (a bound, not a timing assertion).
async function eventually(cond, limitMs = 10_000, what = 'condition') {
  const deadline = Date.now() + limitMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) assert.fail(`${what} not met within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('runs', () => {
  test('run returns the AgentResult', async () => {
    const r = await c.run('echo', { input: { text: 'hi' }, request_id: 'ts-run-1' });
    assert.equal(r.success, true);
    assert.equal(r.agent_name, 'echo');
    assert.deepEqual(r.output, { text: 'hi' });
    assert.equal(r.metadata.trace_id, 'ts-run-1');
  });

  test('gather returns the results in task order', async () => {
    const rs = await c.gather('echo', [{ input: 'a' }, { input: 'b' }, { input: 'c' }], { maxConcurrency: 2 });
    assert.deepEqual(rs.map((r) => r.output), ['a', 'b', 'c']);
    assert.ok(rs.every((r) => r.success));
  });

  test('gather with maxConcurrency 0 is a SpecValidationError', async () => {
    await assert.rejects(c.gather('echo', [{ input: 1 }], { maxConcurrency: 0 }), (err) => {
      assert.ok(err instanceof SpecValidationError);
      assert.equal(err.status, 400);
      assert.match(err.detail, /max_concurrency 0/);
      return true;
    });
  });

  test('runGroup returns a GroupResult for panel', async () => {
    const r = await c.runGroup('panel', { input: 'new plan' });
    assert.equal(r.group, true);
    assert.equal(r.success, true);
    assert.deepEqual(Object.keys(r.outputs).sort(), ['finance', 'legal']);
    assert.equal(r.metadata.group_name, 'panel');
  });

  test('listAgents and listGroups', async () => {
    const agents = await c.listAgents();
    assert.ok(agents.includes('echo') && agents.includes('slow'));
    assert.ok((await c.listGroups()).includes('panel'));
  });
});

describe('schemas, topology, health', () => {
  test("agentSchema returns the agent's input and output JSON Schemas", async () => {
    const s = await c.agentSchema('triage');
    assert.equal(s.name, 'triage');
    assert.deepEqual(s.input.required, ['text']);
    assert.deepEqual(s.output.properties.category.enum, ['billing', 'tech', 'other']);
    // An agent without input_type or output_type takes and gives any value.
    assert.deepEqual(await c.agentSchema('echo'), { name: 'echo', input: {}, output: {} });
    await assert.rejects(c.agentSchema('nope'), (err) => err instanceof RegistryError && /unknown agent "nope"/.test(err.detail));
  });

  test('groupTopology returns the nodes, the edges with their conditions, entry, terminal and a flowchart', async () => {
    const t = await c.groupTopology('support');
    assert.equal(t.name, 'support');
    assert.equal(t.kind, 'graph');
    assert.deepEqual(t.nodes.map((n) => [n.name, n.agent]), [['triage', 'triage'], ['billing', 'billing_expert'], ['tech', 'tech_expert']]);
    assert.deepEqual(t.edges.map((e) => [e.from, e.to, e.when]), [
      ['triage', 'billing', 'output.category == "billing"'],
      ['triage', 'tech', 'output.category == "tech"'],
    ]);
    assert.deepEqual(t.entry, ['triage']);
    assert.deepEqual(t.terminal, ['billing', 'tech']);
    assert.match(t.mermaid, /^flowchart TD\n/);
    await assert.rejects(c.groupTopology('nope'), (err) => err instanceof RegistryError && /unknown group "nope"/.test(err.detail));
  });

  test('health answers {status: "ok"}', async () => {
    assert.deepEqual(await c.health(), { status: 'ok' });
  });
});

describe('errors', () => {
  test('an unknown agent is a RegistryError (404) with the request id', async () => {
    await assert.rejects(c.run('nope', { input: 1 }, { requestId: 'ts-req-404' }), (err) => {
      assert.ok(err instanceof RegistryError, `got ${err}`);
      assert.ok(err instanceof AgentRuntimeError);
      assert.ok(err instanceof SvcError);
      assert.equal(err.name, 'RegistryError');
      assert.equal(err.kind, 'RegistryError');
      assert.equal(err.status, 404);
      assert.match(err.detail, /unknown agent "nope"/);
      assert.equal(err.requestId, 'ts-req-404');
      assert.equal(err.problem.error, 'RegistryError');
      return true;
    });
  });

  test('a body without input is a SpecValidationError (400)', async () => {
    await assert.rejects(c.run('echo', { inptu: 1 }), (err) => {
      assert.ok(err instanceof SpecValidationError, `got ${err}`);
      assert.equal(err.status, 400);
      assert.match(err.detail, /input is required/);
      return true;
    });
  });

  test('an input the agent refuses is a SpecValidationError naming it', async () => {
    await assert.rejects(c.run('triage', { input: { ticket: 'x' } }), (err) => {
      assert.ok(err instanceof SpecValidationError);
      assert.match(err.detail, /input_type/);
      return true;
    });
  });

  test('the result of an unknown run is a RegistryError', async () => {
    await assert.rejects(c.runHandle('01a20fc7-bb21-798e-b57a-41ea6f94134a').status(), RegistryError);
  });
});

describe('submitted runs', () => {
  test('submit, stream the events, then the result', async () => {
    const h = await c.submit('panel', { input: 'new plan' }, { kind: 'group' });
    assert.match(h.runId, /^[0-9a-f-]{36}$/);
    const events = [];
    for await (const ev of h.events()) events.push(ev);
    assert.ok(events.length >= 2);
    assert.equal(events[0].type, 'agent_started');
    assert.equal(events.at(-1).type, 'group_completed');
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
    assert.ok(events.every((e) => e.run_id === h.runId));
    const r = await h.result();
    assert.equal(r.group, true);
    assert.equal(r.success, true);
    const st = await h.status();
    assert.equal(st.state, 'completed');
    assert.equal(st.progress.completed, 3);
    // The status names the run's trace: its result's, and its tree's key.
    assert.equal(st.trace_id, r.metadata.trace_id);
    const page = await c.listRuns({ limit: 10 });
    assert.equal(page.runs.find((x) => x.run_id === h.runId)?.trace_id, st.trace_id);
  });

  test('events resume after lastEventId', async () => {
    const h = await c.submit('panel', { input: 'x' });
    await h.result();
    const all = [];
    for await (const ev of h.events()) all.push(ev.seq);
    const rest = [];
    for await (const ev of h.events({ lastEventId: 2 })) rest.push(ev.seq);
    assert.deepEqual(rest, all.filter((s) => s > 2));
  });

  test('the same idempotency key returns the same run', async () => {
    const key = `ts-key-${Date.now()}`;
    const a = await c.submit('echo', { input: 1 }, { idempotencyKey: key });
    const b = await c.submit('echo', { input: 1 }, { idempotencyKey: key });
    assert.equal(a.runId, b.runId);
    await assert.rejects(c.submit('echo', { input: 2 }, { idempotencyKey: key }), (err) => err.status === 409);
  });

  test('submitting to an unknown target is a RegistryError', async () => {
    await assert.rejects(c.submit('nope', { input: 1 }), RegistryError);
  });

  test('cancel ends the run: cancelled state, run_cancelled event, no result', async () => {
    const h = await c.submit('slow', { input: 'x' });
    await eventually(async () => (await h.status()).state === 'running', 10_000, 'running');
    await h.cancel();
    await h.cancel(); // idempotent
    const types = [];
    for await (const ev of h.events()) types.push(ev.type);
    assert.equal(types.at(-1), 'run_cancelled');
    const st = await h.status();
    assert.equal(st.state, 'cancelled');
    await assert.rejects(h.result(), (err) => err instanceof RunStateError && err.status === 409);
  });

  test('listRuns pages the submitted runs, filtered by state', async () => {
    await (await c.submit('echo', { input: 'a' })).result();
    await (await c.submit('echo', { input: 'b' })).result();
    const page = await c.listRuns({ state: 'completed', limit: 1 });
    assert.equal(page.runs.length, 1);
    assert.equal(page.runs[0].state, 'completed');
    assert.ok(page.next_cursor);
    const next = await c.listRuns({ state: 'completed', limit: 1, cursor: page.next_cursor });
    assert.equal(next.runs.length, 1);
    assert.notEqual(next.runs[0].run_id, page.runs[0].run_id);
  });
});

describe('observability', () => {
  test('streamEvents yields the runtime events asked for', async () => {
    const ac = new AbortController();
    const it = c.streamEvents({ eventTypes: ['agent_completed'], agent: 'echo', signal: ac.signal })[Symbol.asyncIterator]();
    const first = it.next();
    let got = null;
    first.then((v) => { got = v; }, () => {});
    // The subscription opens with the first next(); run until it sees one.
    await eventually(async () => {
      if (got) return true;
      await c.run('echo', { input: 'streamed' });
      return got !== null;
    }, 10_000, 'an agent_completed event');
    const { value } = await first;
    assert.equal(value.event_type, 'agent_completed');
    assert.equal(value.agent_name, 'echo');
    assert.equal(typeof value.payload.tokens_used, 'number');
    await it.return();
    ac.abort();
  });

  test('streamEvents ends when its signal aborts', async () => {
    const ac = new AbortController();
    const it = c.streamEvents({ signal: ac.signal, eventTypes: 'batch_completed' })[Symbol.asyncIterator]();
    const p = it.next();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(p, (err) => err.name === 'AbortError');
  });

  test('usage, runtimeStats and listTools', async () => {
    await c.run('echo', { input: 'u' });
    // The event store writes in batches: the rollup sees the run shortly.
    let u;
    await eventually(async () => {
      u = await c.usage('agent');
      return (u.groups?.echo?.invocations ?? 0) >= 1;
    }, 10_000, 'usage of echo');
    assert.equal(u.group_by, 'agent');
    assert.ok(u.total.tokens_used > 0);
    assert.equal(typeof u.total.cost_usd, 'number'); // test:echo is free: 0
    assert.equal(typeof u.groups.echo.cost_usd, 'number');
    const none = await c.usage('none');
    assert.equal(none.group_by, 'none');
    const stats = await c.runtimeStats();
    assert.ok(stats.header.agents_completed >= 1);
    const tools = await c.listTools();
    assert.ok(Array.isArray(tools));
    assert.ok(tools.every((t) => typeof t.name === 'string'));
  });
});

describe('run history and time windows', () => {
  test('listRuns lists synchronous runs beside submitted ones, filtered, with the total', async () => {
    const trace = `ts-hist-${Date.now()}`;
    await c.run('echo', { input: 'h', request_id: trace });
    let page;
    await eventually(async () => {
      page = await c.listRuns({ type: 'run', target: 'echo', status: 'completed', limit: 5 });
      return page.runs.some((r) => r.trace_id === trace);
    }, 10_000, 'the run in the history');
    const row = page.runs.find((r) => r.trace_id === trace);
    assert.equal(row.type, 'run');
    assert.equal(row.status, 'completed');
    assert.equal(row.run_id, '');
    assert.ok(page.total >= 1);
    assert.ok(page.runs.every((r) => r.type === 'run' && r.target === 'echo' && r.status === 'completed'));
    const submitted = await c.listRuns({ type: 'submitted', limit: 5 });
    assert.ok(submitted.runs.every((r) => r.type === 'submitted' && r.run_id));
    await assert.rejects(c.listRuns({ status: 'done' }), (err) => err.status === 400 && /status/.test(err.message));
  });

  test('usage, toolUsage and runtimeStats take since and until', async () => {
    const before = new Date();
    await c.run('echo', { input: 'windowed' });
    let u;
    await eventually(async () => {
      u = await c.usage('agent', { since: before });
      return (u.groups?.echo?.invocations ?? 0) >= 1;
    }, 10_000, 'usage since the run');
    const none = await c.usage('none', { until: new Date(before.getTime() - 3_600_000) });
    assert.equal(none.total.invocations, 0);
    const recent = await c.usage('none', { since: '1h' });
    assert.ok(recent.total.invocations >= 1);
    const tools = await c.toolUsage('tool', { since: '1h', until: new Date(Date.now() + 60_000) });
    assert.ok(Array.isArray(tools.rows));
    const stats = await c.runtimeStats({ since: before });
    assert.ok(stats.header.agents_completed >= 1);
    await assert.rejects(c.usage('agent', { since: 'yesterday' }), (err) => err.status === 400 && /since/.test(err.message));
  });
});

describe('timeouts and aborts', () => {
  test('the default timeout is 30 s', () => {
    assert.equal(DEFAULT_TIMEOUT_MS, 30_000);
  });

  test('timeoutMs bounds a request', async () => {
    const quick = new Client(srv.url, { timeoutMs: 200 });
    await assert.rejects(quick.run('slow', { input: 1 }), (err) => err.name === 'TimeoutError' && !(err instanceof SvcError));
  });

  test("the caller's signal aborts a request, beside the timeout", async () => {
    const ac = new AbortController();
    const p = c.run('slow', { input: 1 }, { signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    await assert.rejects(p, (err) => err.name === 'AbortError');
  });

  test('an aborted signal stops result() and events()', async () => {
    const h = await c.submit('slow', { input: 1 });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    await assert.rejects(h.result({ signal: ac.signal }), (err) => err.name === 'AbortError');
    const ac2 = new AbortController();
    const it = h.events({ signal: ac2.signal })[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.value.type, 'agent_started');
    const p = it.next();
    ac2.abort();
    await assert.rejects(p, (err) => err.name === 'AbortError');
    await h.cancel();
  });
});

describe('bearer token', () => {
  let authed;
  before(async () => {
    authed = await startServer({ args: ['--auth-token', 'sekret-ts'] });
  });
  after(async () => {
    await authed?.stop();
  });

  test('without the token: UnauthorizedError (401)', async () => {
    await assert.rejects(new Client(authed.url).listAgents(), (err) => {
      assert.ok(err instanceof UnauthorizedError, `got ${err}`);
      assert.equal(err.status, 401);
      return true;
    });
    await assert.rejects(new Client(authed.url, { token: 'wrong' }).listAgents(), UnauthorizedError);
  });

  test('with the token: calls and streams pass', async () => {
    const ok = new Client(authed.url, { token: 'sekret-ts' });
    assert.ok((await ok.listAgents()).includes('echo'));
    const streamed = [];
    for await (const { result } of ok.gatherStream('echo', [{ input: 'a' }, { input: 'b' }])) streamed.push(result.output);
    assert.deepEqual(streamed.sort(), ['a', 'b']);
    await assert.rejects(async () => {
      for await (const _ of new Client(authed.url).gatherStream('echo', [{ input: 'a' }])); // eslint-disable-line no-unused-vars
    }, UnauthorizedError);
    const h = await ok.submit('echo', { input: 1 });
    const types = [];
    for await (const ev of h.events()) types.push(ev.type);
    assert.ok(types.includes('agent_completed'));
    assert.equal((await h.result()).output, 1);
  });
});

test('a kind the client does not know becomes an AgentRuntimeError keeping its name', async () => {
  const fake = async () => new Response(JSON.stringify({ type: 'urn:svc:error:NewError', title: 'x', status: 500, detail: 'd', error: 'NewError', message: 'd', request_id: 'r' }),
    { status: 500, headers: { 'Content-Type': 'application/problem+json' } });
  await assert.rejects(new Client('http://x', { fetch: fake }).listAgents(), (err) => {
    assert.equal(err.constructor, AgentRuntimeError);
    assert.equal(err.kind, 'NewError');
    assert.equal(err.requestId, 'r');
    return true;
  });
});

describe('token streaming', () => {
  const answer = 'one two three four five six';

  test('runStream yields the deltas in order, their text the answer, then the result', async () => {
    const deltas = [];
    let result;
    for await (const ev of c.runStream('writer', { id: 't-stream', input: 'x' })) {
      assert.equal(result, undefined, 'an event after the result');
      if (ev.type === 'result') result = ev.result;
      else deltas.push(ev);
    }
    assert.ok(deltas.length >= 1);
    assert.deepEqual(deltas.map((d) => d.index), deltas.map((_, i) => i));
    assert.ok(deltas.every((d) => d.type === 'delta' && d.agent === 'writer' && d.task_id === 't-stream'));
    assert.equal(deltas.map((d) => d.text).join(''), answer);
    assert.equal(result.success, true);
    assert.equal(result.output, answer);
  });

  test('runStream of a failed run throws what run() throws', async () => {
    await assert.rejects(() => c.run('nope', { input: 1 }), RegistryError);
    await assert.rejects(async () => {
      for await (const ev of c.runStream('nope', { input: 1 })) assert.fail(`an event ${JSON.stringify(ev)}`);
    }, (err) => err instanceof RegistryError && err.status === 404 && /unknown agent "nope"/.test(err.detail));
    const budget = async () => { for await (const _ of c.runStream('writer', { input: 'x', token_budget: 1 })); };
    await assert.rejects(budget, (err) => err instanceof SvcError && err.kind === 'BudgetExceededError' && err.status === 429);
  });

  test('a submitted run followed with deltas: its events and its deltas, no delta without asking', async () => {
    const h = await c.submit('writer', { input: 'x' });
    const withDeltas = [];
    const plain = [];
    await Promise.all([
      (async () => { for await (const ev of h.events({ deltas: true })) withDeltas.push(ev); })(),
      (async () => { for await (const ev of h.events()) plain.push(ev); })(),
    ]);
    const deltas = withDeltas.filter((e) => e.type === 'delta');
    assert.equal(deltas.map((d) => d.text).join(''), answer);
    assert.ok(deltas.every((d) => d.seq === 0 && d.run_id === h.runId && d.agent === 'writer'));
    const completed = withDeltas.findIndex((e) => e.type === 'agent_completed');
    assert.ok(withDeltas.slice(completed).every((e) => e.type !== 'delta'), 'a delta after agent_completed');
    assert.deepEqual(withDeltas.filter((e) => e.type !== 'delta'), plain);
    assert.ok(plain.every((e) => e.type !== 'delta'));
  });
});
