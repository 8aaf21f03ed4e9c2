// The examples of README.md ("Clients") and docs/clients.md, run as they
// are written against a real svc serve (only the package name and the
// server's address are mapped to this checkout and the test's server).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { repoRoot, startServer } from '../support/server.js';

let srv;
let dir;
before(async () => {
  srv = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'svc-ts-docs-'));
});
after(async () => {
  await srv?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// The first ```lang block after the heading.
function block(file, heading, lang) {
  const text = readFileSync(join(repoRoot, file), 'utf8');
  const at = text.indexOf(`\n${heading}\n`);
  assert.ok(at >= 0, `${file}: no heading ${heading}`);
  const m = text.slice(at).match(new RegExp('```' + lang + '\\n([\\s\\S]*?)\\n```'));
  assert.ok(m, `${file}: no \`\`\`${lang} block under ${heading}`);
  return m[1];
}

async function runExample(name, code) {
  const index = pathToFileURL(join(repoRoot, 'clients/ts/src/index.js')).href;
  const src = code.replaceAll("'@svc-dev/client'", `'${index}'`).replaceAll('http://127.0.0.1:8420', srv.url);
  assert.notEqual(src, code, 'the example names the package and the server');
  const file = join(dir, `${name}.mjs`);
  writeFileSync(file, src);
  const { stdout } = await promisify(execFile)(process.execPath, [file], {
    timeout: 30_000, env: { ...process.env, SVC_AUTH_TOKEN: '' },
  });
  return stdout;
}

test("README's example runs and prints what its comments say", async () => {
  const out = await runExample('readme', block('README.md', '## Clients', 'js'));
  assert.match(out, /^\{ text: 'hello' \}$/m);
  assert.match(out, /^1 agent_started$/m);
  assert.match(out, /^7 group_completed$/m);
});

test("docs/clients.md's TypeScript example runs", async () => {
  const out = await runExample('clients', block('docs/clients.md', '## TypeScript and JavaScript', 'ts'));
  assert.match(out, /^1 agent_started$/m);
  assert.match(out, /group_completed$/m);
  assert.match(out, /^completed true$/m);
  assert.match(out, /^404 unknown agent "nope"/m);
  assert.match(out, /^1000 1000$/m);
  assert.match(out, /^ok$/m);
  assert.match(out, /^\[ 'text' \]$/m);
  assert.match(out, /^\[ 'billing', 'tech' \]$/m);
});
