// Callbacks (callback_url) of batches and submitted runs against a real
// `svc serve` with --webhook-key-file, and a receiver on 127.0.0.1 that
// checks X-Svc-Signature as docs/api.md shows.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, SpecValidationError } from '../src/index.js';
import { startServer } from '../support/server.js';

const key = 'a webhook key for the TypeScript tests';
let srv;
let plain;
let rcv;
let rcvURL;
const posts = [];

// verify checks X-Svc-Signature: t=<unix>,v1=<hex HMAC-SHA256 of t.body>.
function verify(header, body) {
  const parts = Object.fromEntries(header.split(',').map((p) => p.split('=')));
  const want = createHmac('sha256', key).update(`${parts.t}.`).update(body).digest();
  const got = Buffer.from(parts.v1 ?? '', 'hex');
  return got.length === want.length && timingSafeEqual(got, want) && Math.abs(Date.now() / 1000 - Number(parts.t)) < 300;
}

before(async () => {
  rcv = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      posts.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.end();
    });
  });
  await new Promise((res) => rcv.listen(0, '127.0.0.1', res));
  rcvURL = `http://127.0.0.1:${rcv.address().port}`;
  const keyFile = join(mkdtempSync(join(tmpdir(), 'svc-ts-key-')), 'key');
  writeFileSync(keyFile, key);
  srv = await startServer({ args: ['--webhook-key-file', keyFile, '--webhook-allow-private'] });
  plain = await startServer();
});

after(async () => {
  await srv?.stop();
  await plain?.stop();
  await new Promise((res) => rcv?.close(res));
});

async function delivered(status) {
  for (let i = 0; i < 400; i++) {
    const st = await status();
    if (st.callback?.state === 'delivered') return st;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the callback was not delivered');
}

describe('webhooks', () => {
  test('submitBatch and submit take callbackUrl; the POSTs are signed', async () => {
    const c = new Client(srv.url);
    const acc = await c.submitBatch('echo', [{ input: 'a' }, { input: 'b' }], { callbackUrl: `${rcvURL}/batch` });
    const st = await delivered(() => c.batchStatus(acc.batch_id));
    assert.equal(st.callback.url, `${rcvURL}/batch`);
    assert.equal(st.callback.last_status, 200);
    const run = await c.submit('echo', { input: 'hi' }, { callbackUrl: `${rcvURL}/run` });
    const rs = await delivered(() => run.status());
    assert.equal(rs.callback.attempts, 1);
    const byId = Object.fromEntries(posts.map((p) => [p.headers['x-svc-delivery'], p]));
    const b = byId[`batch:${acc.batch_id}`];
    const r = byId[`run:${run.runId}`];
    assert.ok(b && r, 'both callbacks arrived');
    for (const p of [b, r]) assert.ok(verify(p.headers['x-svc-signature'], p.body), 'signature verifies');
    assert.equal(JSON.parse(b.body).batch.counts.succeeded, 2);
    assert.equal(JSON.parse(r.body).result.output, 'hi');
  });

  test('a server without --webhook-key-file refuses callbackUrl', async () => {
    const c = new Client(plain.url);
    await assert.rejects(c.submitBatch('echo', [{ input: 'a' }], { callbackUrl: 'https://example.com/x' }),
      (err) => err instanceof SpecValidationError && /--webhook-key-file/.test(err.detail));
    await assert.rejects(c.submit('echo', { input: 'a' }, { callbackUrl: 'https://example.com/x' }),
      (err) => err instanceof SpecValidationError && /--webhook-key-file/.test(err.detail));
  });
});
