// The timeout combined with the caller's signal, also where the platform
// has no AbortSignal.any (node 18).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '../src/index.js';

// A fetch that never answers until its signal aborts.
const hanging = (_url, init) => new Promise((_, reject) => {
  if (init.signal.aborted) return reject(init.signal.reason);
  init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true });
});

for (const withAny of [true, false]) {
  test(`timeout and caller signal combined (AbortSignal.any ${withAny ? 'present' : 'absent'})`, async (t) => {
    // AbortSignal.timeout's timer does not hold the process open, and a
    // hanging fake fetch holds nothing: keep the loop alive meanwhile.
    const alive = setInterval(() => {}, 1000);
    t.after(() => clearInterval(alive));
    const saved = AbortSignal.any;
    if (!withAny) {
      AbortSignal.any = undefined;
      t.after(() => { AbortSignal.any = saved; });
    }
    const c = new Client('http://127.0.0.1:1', { fetch: hanging, timeoutMs: 50 });
    await assert.rejects(c.listAgents({ signal: new AbortController().signal }), (err) => err.name === 'TimeoutError');
    const ac = new AbortController();
    const p = new Client('http://127.0.0.1:1', { fetch: hanging }).listAgents({ signal: ac.signal });
    ac.abort();
    await assert.rejects(p, (err) => err.name === 'AbortError');
    const pre = AbortSignal.abort();
    await assert.rejects(new Client('http://127.0.0.1:1', { fetch: hanging }).listAgents({ signal: pre }), (err) => err.name === 'AbortError');
  });
}
