// Measures Client.gatherStream against a real svc serve (built from the
// repository, or $SVC_BIN): N test:echo tasks (default 100,000; the
// tasks of the Go client's BenchmarkGatherStream) at max_concurrency
// 1000 through one streamed gather, beside the same tasks as plain
// gathers of 10,000 (the baseline), each on a fresh server. Prints
// tasks/s, the client's peak RSS and the server's.
//
//   nice node clients/ts/support/bench-gatherstream.js [N]

import { readFileSync } from 'node:fs';
import { Client } from '../src/index.js';
import { startServer } from './server.js';

const n = Number(process.argv[2] || 100_000);
const conc = 1000;
const chunk = 10_000;

function* tasks(count) {
  for (let i = 0; i < count; i++) yield { input: { n: i, text: 'hello world' } };
}

// Peak RSS of a process, in MiB (VmHWM).
function peakRSS(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmHWM:\s+(\d+) kB/m);
  return m ? Number(m[1]) / 1024 : NaN;
}

async function streamed(c, count) {
  let got = 0;
  for await (const { result } of c.gatherStream('echo', tasks(count), { maxConcurrency: conc })) {
    if (!result.success) throw new Error(`a task failed: ${JSON.stringify(result.error)}`);
    got++;
  }
  if (got !== count) throw new Error(`${got} results for ${count} tasks`);
}

async function plain(c, count) {
  const batch = [...tasks(chunk)];
  for (let done = 0; done < count; done += chunk) {
    const rs = await c.gather('echo', batch, { maxConcurrency: conc, timeoutMs: 0 });
    if (rs.length !== chunk || !rs.every((r) => r.success)) throw new Error('plain gather: a task failed');
  }
}

async function measure(name, fn) {
  // Warnings only: at info the server logs every event, and this process,
  // which reads its output, would spend its time on that.
  const srv = await startServer({ args: ['--log-level', 'warn'] });
  try {
    const c = new Client(srv.url, { timeoutMs: 0 });
    await fn(c, chunk); // warm up
    const start = performance.now();
    await fn(c, n);
    const s = (performance.now() - start) / 1000;
    return { name, tasksPerSec: Math.round(n / s), seconds: s.toFixed(1), serverPeakMiB: peakRSS(srv.pid).toFixed(0) };
  } finally {
    await srv.stop();
  }
}

const rows = [];
rows.push(await measure('gatherStream, one request', streamed));
const clientAfterStream = process.resourceUsage().maxRSS / 1024;
rows.push(await measure(`gather, ${n / chunk} requests of ${chunk}`, plain));
const clientAfterPlain = process.resourceUsage().maxRSS / 1024;
console.log(`${n} test:echo tasks, max_concurrency ${conc}, node ${process.version}`);
for (const r of rows) console.log(`${r.name}: ${r.tasksPerSec} tasks/s (${r.seconds} s), server peak RSS ${r.serverPeakMiB} MiB`);
console.log(`client peak RSS: ${clientAfterStream.toFixed(0)} MiB after the streamed gather, ${clientAfterPlain.toFixed(0)} MiB after the plain gathers`);
