// A client generated from the server's own GET /openapi.json, the way a
// user of another stack would make one: types by openapi-typescript, calls
// through openapi-fetch (both pinned, installed into .cache/ts by `make
// deps`). The program below is type-checked with tsc --strict against the
// generated types, compiled, and run against a real svc serve: a sync run,
// a submit followed by its status and result, a gather, and an error
// answer. A document that generators misread (a wrong schema, a missing
// operation or parameter) fails here, at the type check or at the run.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot, startServer } from '../support/server.js';

const cache = join(repoRoot, '.cache/ts/node_modules');
const tools = {
  generator: process.env.OPENAPI_TS || join(cache, '.bin/openapi-typescript'),
  tsc: process.env.SVC_TSC || join(cache, '.bin/tsc'),
  fetchLib: join(cache, 'openapi-fetch/package.json'),
};
const missing = Object.entries(tools).filter(([, p]) => !existsSync(p)).map(([k]) => k);

let srv;
let dir;
before(async () => {
  if (missing.length) return;
  srv = await startServer({ args: ['--auth-token', 'sekret-gen'] });
  dir = mkdtempSync(join(tmpdir(), 'svc-ts-gen-'));
});
after(async () => {
  await srv?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// The user's program. It prints one JSON line of what it saw; the test
// asserts on it. Every value it reads is typed by the generated paths:
// a wrong name or shape is a compile error.
const program = `
import createClient from 'openapi-fetch';
import type { components, paths } from './schema.js';

type AgentResult = components['schemas']['AgentResult'];
declare const process: { argv: string[] }; // node's, without @types/node

const [baseUrl, token] = process.argv.slice(2);
const svc = createClient<paths>({ baseUrl, headers: { Authorization: \`Bearer \${token}\` } });

function must<T>(r: { data?: T; error?: unknown; response: Response }, what: string): T {
  if (r.data === undefined) throw new Error(\`\${what}: HTTP \${r.response.status} \${JSON.stringify(r.error)}\`);
  return r.data;
}

const out: Record<string, unknown> = {};

// A sync run: POST /agents/{name}/run with a bare TaskSpec.
const run: AgentResult = must(await svc.POST('/agents/{name}/run', {
  params: { path: { name: 'echo' } },
  body: { input: { text: 'generated' }, request_id: 'gen-run-1' },
}), 'run');
out.run = { success: run.success, output: run.output, trace: run.metadata.trace_id, agent: run.agent_name };

// A submit (202 with the run id), then its status until terminal, then its result.
const sub = must(await svc.POST('/submit', {
  params: { header: { 'Idempotency-Key': 'gen-submit-1' } },
  body: { target: 'panel', task: { input: 'plan' }, kind: 'group' },
}), 'submit');
const runId: string = sub.run_id;
let state = '';
for (let i = 0; i < 500; i++) {
  const st = must(await svc.GET('/runs/{id}/status', { params: { path: { id: runId } } }), 'status');
  state = st.state;
  if (state === 'completed' || state === 'failed' || state === 'cancelled') break;
  await new Promise((r) => setTimeout(r, 20));
}
const result = must(await svc.GET('/runs/{id}/result', { params: { path: { id: runId } } }), 'result');
out.submit = {
  state,
  runIdLength: runId.length,
  group: 'outputs' in result ? Object.keys(result.outputs).sort() : null,
  success: result.success,
};

// A gather: the JSON form, results in task order. Its 200 has three media
// types (JSON, and the streamed NDJSON and SSE, as strings): the data is
// their union, told apart by Array.isArray.
const gathered = must(await svc.POST('/agents/{name}/gather', {
  params: { path: { name: 'echo' } },
  body: { tasks: [{ input: 1 }, { input: 2 }, { input: 3 }], max_concurrency: 2 },
}), 'gather');
if (!Array.isArray(gathered)) throw new Error(\`gather: not a list: \${gathered}\`);
const results: AgentResult[] = gathered;
out.gather = results.map((r) => r.output);

// An error: the Problem schema, its kind in error.
const bad = await svc.POST('/agents/{name}/run', { params: { path: { name: 'nope' } }, body: { input: 1 } });
out.error = { status: bad.response.status, kind: bad.error?.error, type: bad.error?.type, hasData: bad.data !== undefined };

console.log(JSON.stringify(out));
`;

test('a client generated from /openapi.json runs, submits and gathers', async (t) => {
  if (missing.length) {
    t.skip(`not installed: ${missing.join(', ')}: run make deps (it installs the pinned openapi-typescript, openapi-fetch and typescript into .cache/ts)`);
    return;
  }
  // The document as the server serves it (behind the token, as every route).
  const res = await fetch(`${srv.url}/openapi.json`, { headers: { Authorization: 'Bearer sekret-gen' } });
  assert.equal(res.status, 200);
  writeFileSync(join(dir, 'openapi.json'), await res.text());
  // The generator with its defaults, as a user would run it.
  // Into a .ts file, not a .d.ts: tsc checks it as the program's own code
  // while --skipLibCheck spares the time of checking the libraries' .d.ts
  // files (the DOM's, openapi-fetch's), which are not what this tests.
  execFileSync(tools.generator, [join(dir, 'openapi.json'), '-o', join(dir, 'schema.ts')], { stdio: ['ignore', 'ignore', 'pipe'] });
  writeFileSync(join(dir, 'main.ts'), program);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ private: true, type: 'module' }));
  symlinkSync(cache, join(dir, 'node_modules'), 'dir'); // openapi-fetch, for tsc and node alike
  const tsc = promisify(execFile)(tools.tsc, ['--strict', '--skipLibCheck', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--lib', 'es2022,dom,dom.asynciterable', '--outDir', 'out', 'main.ts'], { cwd: dir, encoding: 'utf8' });
  await tsc.catch((err) => assert.fail(`tsc on the generated client:\n${err.stdout}${err.stderr}`));

  const { stdout } = await promisify(execFile)(process.execPath, [join(dir, 'out/main.js'), srv.url, 'sekret-gen'], { timeout: 60_000 });
  const out = JSON.parse(stdout);
  assert.deepEqual(out.run, { success: true, output: { text: 'generated' }, trace: 'gen-run-1', agent: 'echo' });
  assert.deepEqual(out.submit, { state: 'completed', runIdLength: 36, group: ['finance', 'legal'], success: true });
  assert.deepEqual(out.gather, [1, 2, 3]);
  assert.deepEqual(out.error, { status: 404, kind: 'RegistryError', type: 'urn:svc:error:RegistryError', hasData: false });
});
