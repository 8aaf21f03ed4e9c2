// Human in the loop against a real `svc serve` (its default SQLite store
// keeps the step log a waiting run resumes from): a submitted run of
// gated waits for the approval of its current_time call, asker's for the
// answer to its ask_human question (support/server.js writes both agents).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client, AgentRuntimeError, ApprovalRequiredError, RunStateError, SpecValidationError,
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

// Polls the run's status until it waits, up to limitMs (a bound, not a
// timing assertion), and returns that status.
async function untilWaiting(h, limitMs = 10_000) {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const st = await h.status();
    if (st.state === 'waiting') return st;
    assert.ok(['pending', 'running'].includes(st.state), `run ${h.runId} is ${st.state}, not on its way to waiting`);
    if (Date.now() > deadline) assert.fail(`run ${h.runId} not waiting within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('approvals', () => {
  test('a submitted run waits for approval, and once approved completes with the tool called', async () => {
    const h = await c.submit('gated', { input: 'approve me' });
    const st = await untilWaiting(h);
    assert.equal(st.waiting.length, 1);
    const w = st.waiting[0];
    assert.match(w.id, /^req_/);
    assert.equal(w.kind, 'approval');
    assert.equal(w.agent, 'gated');
    assert.equal(w.tool, 'current_time');
    assert.ok(!Number.isNaN(Date.parse(w.created_at)));
    // Waiting is not terminal: the run has no result yet.
    await assert.rejects(c.runResult(h.runId), (err) => err instanceof RunStateError && err.status === 409);

    const resumed = await h.resume({ requestId: w.id, approve: true });
    assert.equal(resumed.run_id, h.runId);
    assert.ok(['running', 'completed'].includes(resumed.state), `state after resume: ${resumed.state}`);
    assert.ok(!resumed.waiting?.length, 'the answered request is still open');

    const r = await h.result({ signal: AbortSignal.timeout(10_000) });
    assert.equal(r.success, true);
    assert.equal(r.output.echo, 'approve me');
    // The approved call happened: its result is the tool's, a time.
    assert.equal(typeof r.output.tools.current_time.time, 'string');
    assert.equal((await h.status()).state, 'completed');
  });

  test('a denial followed on the stream: run_waiting with the request, then run_resumed, and the model sees the reason', async () => {
    const h = await c.submit('gated', { input: 'deny me' });
    const types = [];
    let request = null;
    for await (const ev of h.events({ signal: AbortSignal.timeout(10_000) })) {
      types.push(ev.type);
      if (ev.type !== 'run_waiting') continue;
      // The stream stays open while the run waits; answer from it.
      request = ev.request;
      const st = await h.status();
      assert.equal(st.state, 'waiting');
      assert.deepEqual(st.waiting.map((x) => x.id), [request.id]);
      assert.equal(request.kind, 'approval');
      assert.equal(request.tool, 'current_time');
      await c.resumeRun(h.runId, { requestId: request.id, approve: false, reason: 'not on a Sunday' });
    }
    assert.ok(request, `no run_waiting event in ${types}`);
    const waited = types.indexOf('run_waiting');
    assert.ok(types.indexOf('run_resumed') > waited, `events: ${types}`);
    assert.equal(types.at(-1), 'agent_completed');
    const r = await h.result();
    assert.equal(r.success, true);
    // The tool was not called: the model got the denial and its reason.
    const denied = r.output.tools.current_time;
    assert.equal(typeof denied, 'string');
    assert.match(denied, /denied/);
    assert.match(denied, /not on a Sunday/);
  });

  test('resume of a completed run, an unknown request or an answered one is a RunStateError (409)', async () => {
    const h = await c.submit('gated', { input: 'once' });
    const { waiting: [w] } = await untilWaiting(h);
    await assert.rejects(h.resume({ requestId: 'req_0000000000000000', approve: true }), (err) => {
      assert.ok(err instanceof RunStateError, `got ${err}`);
      assert.equal(err.status, 409);
      assert.match(err.detail, /no request "req_0000000000000000"/);
      assert.match(err.detail, new RegExp(`open: ${w.id}`));
      return true;
    });
    await h.resume({ requestId: w.id, approve: true });
    await h.result({ signal: AbortSignal.timeout(10_000) });
    await assert.rejects(h.resume({ requestId: w.id, approve: true }), (err) => {
      assert.ok(err instanceof RunStateError, `got ${err}`);
      assert.ok(err instanceof AgentRuntimeError);
      assert.equal(err.status, 409);
      assert.match(err.detail, /is completed, not waiting/);
      return true;
    });
  });

  test('a decision that does not fit is a SpecValidationError (400) and leaves the run waiting', async () => {
    const h = await c.submit('gated', { input: 'unfit' });
    const { waiting: [w] } = await untilWaiting(h);
    await assert.rejects(h.resume({ requestId: w.id, answer: 'yes' }), (err) => {
      assert.ok(err instanceof SpecValidationError, `got ${err}`);
      assert.equal(err.status, 400);
      assert.match(err.detail, /asks for an approval/);
      return true;
    });
    const st = await h.status();
    assert.equal(st.state, 'waiting');
    assert.deepEqual(st.waiting.map((x) => x.id), [w.id]);
    await h.cancel();
  });

  test('resumeRun without a request id is a TypeError, before any request', async () => {
    const h = c.runHandle('01a20fc7-bb21-798e-b57a-41ea6f94134a');
    assert.throws(() => h.resume({ approve: true }), TypeError);
    assert.throws(() => c.resumeRun(h.runId, { requestId: '', approve: true }), /requestId "": want the id/);
    assert.throws(() => c.resumeRun('', { requestId: 'req_1', approve: true }), TypeError);
  });

  test('a cancelled waiting run ends at once and cannot be resumed', async () => {
    const h = await c.submit('gated', { input: 'cancel me' });
    const { waiting: [w] } = await untilWaiting(h);
    await h.cancel();
    assert.equal((await h.status()).state, 'cancelled');
    await assert.rejects(h.resume({ requestId: w.id, approve: true }), RunStateError);
  });

  test('listRuns filters the waiting runs', async () => {
    const h = await c.submit('gated', { input: 'listed' });
    await untilWaiting(h);
    const page = await c.listRuns({ state: 'waiting', limit: 100 });
    assert.ok(page.runs.some((x) => x.run_id === h.runId), 'the waiting run is not listed');
    assert.ok(page.runs.every((x) => x.state === 'waiting'));
    await h.cancel();
  });

  test('a sync run that reaches an approval throws ApprovalRequiredError (409); a gather fails those tasks', async () => {
    await assert.rejects(c.run('gated', { input: 'now' }), (err) => {
      assert.ok(err instanceof ApprovalRequiredError, `got ${err}`);
      assert.ok(err instanceof AgentRuntimeError);
      assert.ok(!(err instanceof SpecValidationError));
      assert.equal(err.name, 'ApprovalRequiredError');
      assert.equal(err.kind, 'ApprovalRequiredError');
      assert.equal(err.status, 409);
      assert.match(err.detail, /current_time/);
      assert.match(err.detail, /submit the run/);
      return true;
    });
    // In a gather, each such task is its own failed result.
    const rs = await c.gather('gated', [{ input: 1 }, { input: 2 }]);
    assert.deepEqual(rs.map((r) => [r.success, r.error?.type]), [[false, 'ApprovalRequiredError'], [false, 'ApprovalRequiredError']]);
  });
});

describe('questions', () => {
  test('ask_human waits for an answer; the answer, any JSON, is the tool result', async () => {
    const h = await c.submit('asker', { input: 'ask' });
    const { waiting: [w] } = await untilWaiting(h);
    assert.equal(w.kind, 'question');
    assert.equal(w.tool, 'ask_human');
    await assert.rejects(h.resume({ requestId: w.id, approve: true }), (err) => err instanceof SpecValidationError && /asks a question/.test(err.detail));
    await h.resume({ requestId: w.id, answer: { color: 'blue', shades: [1, 2] } });
    const r = await h.result({ signal: AbortSignal.timeout(10_000) });
    assert.equal(r.success, true);
    assert.deepEqual(r.output.tools.ask_human, { color: 'blue', shades: [1, 2] });
  });

  for (const answer of [null, 0, '', false]) {
    test(`${JSON.stringify(answer)} is an answer, not a missing one`, async () => {
      const h = await c.submit('asker', { input: 'ask' });
      const { waiting: [w] } = await untilWaiting(h);
      await h.resume({ requestId: w.id, answer });
      const r = await h.result({ signal: AbortSignal.timeout(10_000) });
      assert.equal(r.success, true);
      assert.equal(r.output.tools.ask_human, answer);
    });
  }
});
