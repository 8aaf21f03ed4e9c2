// Client.streamEvents keeps following GET /events/stream when the
// connection drops: a proxy in front of a real svc serve cuts a stream,
// injects frames that are not events, or goes silent; and the server
// itself restarts on the same port.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client, SpecValidationError, UnauthorizedError } from '../src/index.js';
import { startServer } from '../support/server.js';

// Pings every 100 ms: a live connection is never silent for long, so a
// short idleTimeoutMs tells a dead one from a quiet one.
const ARGS = ['--sse-heartbeat', '100ms'];

// Waits for cond() to hold, running an echo run before each look (the
// events to see), up to 20 s (a bound, not a timing assertion).
async function runUntil(c, cond, what) {
  const deadline = Date.now() + 20_000;
  let i = 0;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`${what}: not within 20 s`);
    await c.run('echo', { input: `tick ${i++}` }).catch(() => {}); // the server may be restarting
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Follows the stream in the background, collecting events until stop().
function follow(c, opts) {
  const ac = new AbortController();
  const got = [];
  const reconnects = [];
  const done = (async () => {
    for await (const ev of c.streamEvents({ ...opts, signal: ac.signal, onReconnect: (r) => reconnects.push(r) })) got.push(ev);
  })().catch((err) => (ac.signal.aborted ? null : err));
  return {
    got, reconnects, done,
    async stop() {
      ac.abort();
      return done;
    },
  };
}

describe('through a proxy that breaks streams', () => {
  let srv;
  let proxy;
  const plans = []; // what the proxy does with each next stream: 'cut', 'silent' or 'pass'
  let streams = 0;

  before(async () => {
    srv = await startServer({ args: ARGS });
    const upstream = new URL(srv.url);
    proxy = http.createServer((req, res) => {
      const plan = req.url.startsWith('/events/stream') ? (streams++, plans.shift() ?? 'pass') : 'pass';
      const up = http.request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        res.flushHeaders();
        if (plan === 'pass') {
          ur.pipe(res);
          return;
        }
        if (plan === 'silent') {
          ur.resume(); // read, never forward: a connection that died without a word
          return;
        }
        // cut: forward the first event, then two frames that are not
        // events, then reset the connection.
        let text = '';
        let done = false;
        ur.on('data', (chunk) => {
          if (done) return;
          text += chunk;
          const m = text.match(/(^|\n)id: [^\n]*\nevent: [^\n]*\ndata: [^\n]*\n\n/);
          if (!m) return;
          done = true;
          ur.destroy();
          const frame = text.slice(0, m.index + m[0].length);
          res.write(frame + 'event: agent_completed\ndata: {"not json\n\ndata: {"no_event_type": true}\n\n', () => res.socket.destroy());
        });
      });
      req.pipe(up);
    });
    await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  });

  after(async () => {
    proxy?.closeAllConnections();
    await new Promise((r) => (proxy ? proxy.close(r) : r()));
    await srv?.stop();
  });

  const viaProxy = () => new Client(`http://127.0.0.1:${proxy.address().port}`);

  test('a cut stream reconnects, skipping the frames that are not events', async () => {
    plans.push('cut');
    const before = streams;
    const c = viaProxy();
    const f = follow(c, { eventTypes: 'agent_completed', agent: 'echo', idleTimeoutMs: 0 });
    await runUntil(c, () => f.got.length >= 3, 'three events over two connections');
    assert.equal(await f.stop(), null);
    assert.equal(streams - before, 2, 'stream requests');
    assert.equal(f.reconnects.length, 1);
    assert.equal(f.reconnects[0].attempt, 1);
    assert.ok(f.got.every((ev) => ev.event_type === 'agent_completed' && ev.agent_name === 'echo'), JSON.stringify(f.got.slice(0, 3)));
  });

  test('reconnect: false ends with the error of the cut', async () => {
    plans.push('cut');
    const c = viaProxy();
    const f = follow(c, { eventTypes: 'agent_completed', reconnect: false });
    await runUntil(c, () => f.got.length >= 1, 'the first event');
    const err = await f.done;
    assert.ok(err instanceof Error, `the iteration ended with ${err}`);
    assert.equal(f.got.length, 1);
    assert.equal(f.reconnects.length, 0);
  });

  test('a connection silent past idleTimeoutMs is replaced; pings keep a quiet one', async () => {
    plans.push('silent');
    const before = streams;
    const c = viaProxy();
    const f = follow(c, { eventTypes: 'agent_completed', idleTimeoutMs: 2_500 });
    await runUntil(c, () => f.got.length >= 1, 'an event after the silent connection');
    assert.equal(f.reconnects.length, 1);
    assert.equal(f.reconnects[0].error.name, 'StreamIdleError');
    // No event for 3 s: the server's pings (every 100 ms) keep it.
    await new Promise((r) => setTimeout(r, 3_000));
    assert.equal(f.reconnects.length, 1, 'a reconnect of a live, quiet stream');
    assert.equal(await f.stop(), null);
    assert.equal(streams - before, 2);
  });

  test("an error the server answers is thrown at once, not retried", async () => {
    const c = viaProxy();
    const f = follow(c, { eventTypes: 'no_such_event' });
    const err = await f.done;
    assert.ok(err instanceof SpecValidationError, `got ${err}`);
    assert.equal(f.reconnects.length, 0);
  });
});

describe('across a restart of the server', () => {
  let srv;
  after(async () => {
    await srv?.stop();
  });

  test('the stream follows the new server on the same port', async () => {
    srv = await startServer({ args: ARGS });
    const c = new Client(srv.url);
    const f = follow(c, { eventTypes: 'agent_completed', agent: 'echo' });
    await runUntil(c, () => f.got.length >= 1, 'an event before the restart');
    const port = srv.port;
    await srv.stop();
    srv = null;
    const seen = f.got.length;
    srv = await startServer({ args: ARGS, port });
    await runUntil(c, () => f.got.length > seen, 'an event from the new server');
    assert.ok(f.reconnects.length >= 1);
    assert.ok(f.reconnects.every((r, i) => r.attempt === i + 1), JSON.stringify(f.reconnects.map((r) => r.attempt)));
    assert.equal(await f.stop(), null);
  });
});

test('with a token: health needs none, the stream needs it', async () => {
  const srv = await startServer({ args: ['--auth-token', 'sekret-ev'] });
  try {
    assert.deepEqual(await new Client(srv.url).health(), { status: 'ok' });
    const f = follow(new Client(srv.url), {});
    assert.ok((await f.done) instanceof UnauthorizedError);
    assert.equal(f.reconnects.length, 0);
  } finally {
    await srv.stop();
  }
});
