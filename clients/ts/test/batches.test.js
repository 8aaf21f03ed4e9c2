// Batches (POST /batches and the routes under it) against a real `svc serve`.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, RegistryError, SpecValidationError } from '../src/index.js';
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

async function* tasks(n) {
  for (let i = 0; i < n; i++) yield { id: `t${i}`, input: i };
}

describe('batches', () => {
  test('submitBatch stores the tasks; batchResults follows them in index order to the end', async () => {
    const acc = await c.submitBatch('echo', tasks(500), { maxConcurrency: 20 });
    assert.equal(acc.total, 500);
    let next = 0;
    for await (const line of c.batchResults(acc.batch_id, { follow: true })) {
      assert.equal(line.index, next);
      assert.equal(line.result.task_id, `t${next}`);
      assert.equal(line.result.output, next);
      next++;
    }
    assert.equal(next, 500);
    let st = await c.batchStatus(acc.batch_id);
    for (let i = 0; st.state === 'running' && i < 200; i++) {
      await new Promise((r) => setTimeout(r, 20));
      st = await c.batchStatus(acc.batch_id);
    }
    assert.equal(st.state, 'completed');
    assert.deepEqual(st.counts, { total: 500, succeeded: 500, failed: 0, running: 0 });
    // By finish order, after the 495th: the last five, seq 496..500.
    const tail = [];
    for await (const line of c.batchResults(acc.batch_id, { order: 'finish', after: 495 })) tail.push(line.seq);
    assert.deepEqual(tail, [496, 497, 498, 499, 500]);
    const page = await c.listBatches({ limit: 10 });
    assert.ok(page.batches.some((b) => b.batch_id === acc.batch_id));
  });

  test('a task JSON cannot encode fails as its own result', async () => {
    const big = { input: 10n }; // a BigInt: JSON.stringify throws
    const acc = await c.submitBatch('echo', [{ input: 'a' }, big, { input: 'c' }]);
    const lines = [];
    for await (const line of c.batchResults(acc.batch_id, { follow: true })) lines.push(line);
    assert.deepEqual(lines.map((l) => l.result.success), [true, false, true]);
    assert.equal(lines[1].result.error.type, 'SpecValidationError');
  });

  test('refusals: an unknown agent, max_concurrency 0, an unknown batch', async () => {
    await assert.rejects(c.submitBatch('nope', tasks(3)), (err) => err instanceof RegistryError && /nope/.test(err.detail));
    await assert.rejects(c.submitBatch('echo', tasks(3), { maxConcurrency: 0 }), SpecValidationError);
    // Mode provider: the test provider has no batch API, and the server says so.
    await assert.rejects(c.submitBatch('echo', tasks(3), { mode: 'provider' }), (err) => err instanceof SpecValidationError && /no batch API/.test(err.detail));
    await assert.rejects(c.batchStatus('nope'), RegistryError);
    await assert.rejects(c.cancelBatch('nope'), RegistryError);
    await assert.rejects(async () => {
      for await (const _ of c.batchResults('nope')) { /* none */ }
    }, RegistryError);
  });

  test('cancelBatch stops a batch of slow tasks', async () => {
    const acc = await c.submitBatch('tick', tasks(2000), { maxConcurrency: 2 });
    await c.cancelBatch(acc.batch_id);
    await c.cancelBatch(acc.batch_id); // idempotent
    const st = await c.batchStatus(acc.batch_id);
    assert.equal(st.state, 'cancelled');
    assert.ok(st.counts.succeeded < 2000);
  });
});
