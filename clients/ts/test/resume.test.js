// events() reconnects with Last-Event-ID when the connection breaks
// before the run's end: a proxy in front of a real svc serve cuts the
// first stream after two frames.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client } from '../src/index.js';
import { startServer } from '../support/server.js';

let srv;
let proxy;
const streamRequests = []; // the Last-Event-ID of each stream request

before(async () => {
  srv = await startServer();
  const upstream = new URL(srv.url);
  proxy = http.createServer((req, res) => {
    const isStream = /^\/runs\/[^/]+\/stream/.test(req.url);
    if (isStream) streamRequests.push(req.headers['last-event-id'] ?? null);
    const cut = isStream && streamRequests.length === 1;
    const up = http.request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      if (!cut) {
        ur.pipe(res);
        return;
      }
      let text = '';
      let done = false;
      ur.on('data', (chunk) => {
        if (done) return; // chunks already read when the upstream was cut
        text += chunk;
        const first = text.indexOf('\n\n');
        const second = first < 0 ? -1 : text.indexOf('\n\n', first + 2);
        if (second >= 0) {
          done = true;
          ur.destroy();
          res.write(text.slice(0, second + 2), () => res.socket.destroy());
        }
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

test('a stream cut after two events resumes after the second, nothing lost or repeated', async () => {
  const direct = new Client(srv.url);
  const h = await direct.submit('panel', { input: 'resume' });
  await h.result();
  const want = [];
  for await (const ev of h.events()) want.push(ev.seq);
  assert.ok(want.length > 2);

  const c = new Client(`http://127.0.0.1:${proxy.address().port}`);
  const got = [];
  for await (const ev of c.runHandle(h.runId).events()) got.push(ev.seq);
  assert.deepEqual(got, want);
  assert.deepEqual(streamRequests.slice(0, 2), [null, '2']);
});
