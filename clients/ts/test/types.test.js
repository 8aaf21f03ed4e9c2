// index.d.ts and the error classes against what they describe: the
// values index.js exports, the methods of Client and RunHandle, and the
// error kinds of the server (the root package's errors.go).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import * as mod from '../src/index.js';
import { repoRoot } from '../support/server.js';
import { command, generate, generator } from '../support/gen-types.js';

const dts = readFileSync(new URL('../src/index.d.ts', import.meta.url), 'utf8');

test('index.d.ts declares exactly the values index.js exports', () => {
  const declared = [...dts.matchAll(/^export (?:class|const|function) (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(declared, Object.keys(mod).sort());
});

function methodsOf(cls) {
  const body = dts.match(new RegExp(`^export class ${cls} \\{\\n([\\s\\S]*?)^\\}`, 'm'));
  assert.ok(body, `class ${cls} in index.d.ts`);
  return [...body[1].matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]).filter((n) => n !== 'constructor').sort();
}

for (const cls of ['Client', 'RunHandle']) {
  test(`index.d.ts declares the methods of ${cls}`, () => {
    const actual = Object.getOwnPropertyNames(mod[cls].prototype).filter((n) => n !== 'constructor').sort();
    assert.deepEqual(methodsOf(cls), actual);
  });
}

test('every error kind of the server has its class', () => {
  const src = readFileSync(join(repoRoot, 'errors.go'), 'utf8');
  const kinds = [...src.matchAll(/^\s*Kind\w+\s+Kind = "(\w+)"/gm)].map((m) => m[1]);
  assert.ok(kinds.length >= 20, `kinds found in errors.go: ${kinds}`);
  for (const k of kinds) {
    assert.ok(Object.hasOwn(mod.errorKinds, k), `no class for ${k}`);
    assert.equal(mod.errorKinds[k].name, k);
    assert.ok(mod.errorKinds[k].prototype instanceof mod.SvcError || mod.errorKinds[k] === mod.SvcError);
  }
  assert.deepEqual(Object.keys(mod.errorKinds).sort(), [...kinds].sort());
  // The hierarchy of Kind.Parent.
  for (const k of ['TopologyError', 'PayloadTooLargeError', 'UnsupportedMediaTypeError', 'BadRequestError', 'HeaderTooLargeError']) {
    assert.ok(mod.errorKinds[k].prototype instanceof mod.SpecValidationError, k);
  }
  for (const k of kinds.filter((k) => !['AgentRuntimeError', 'TopologyError', 'PayloadTooLargeError',
    'UnsupportedMediaTypeError', 'BadRequestError', 'HeaderTooLargeError'].includes(k))) {
    assert.equal(Object.getPrototypeOf(mod.errorKinds[k]), mod.AgentRuntimeError, `${k}'s parent`);
  }
});

// tsc is installed by `make deps` (pinned, into .cache/ts, kept out of
// git); $SVC_TSC names another.
test('index.d.ts type-checks with tsc --strict, used as the docs use it', (t) => {
  const tsc = process.env.SVC_TSC || join(repoRoot, '.cache/ts/node_modules/.bin/tsc');
  if (!existsSync(tsc)) {
    t.skip('tsc not installed: run make deps (it installs the pinned typescript into .cache/ts)');
    return;
  }
  const file = fileURLToPath(new URL('typecheck.ts', import.meta.url));
  const r = spawnSync(tsc, ['--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext',
    '--moduleResolution', 'nodenext', '--lib', 'es2022,dom,dom.asynciterable', file], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
});

// openapi-typescript is installed by `make deps` beside tsc (pinned);
// $OPENAPI_TS names another.
test('src/openapi.d.ts is what openapi-typescript makes of docs/openapi.json', (t) => {
  if (!existsSync(generator)) {
    t.skip('openapi-typescript not installed: run make deps (it installs the pinned openapi-typescript into .cache/ts)');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'svc-ts-types-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const out = join(dir, 'openapi.d.ts');
  generate(out);
  const committed = readFileSync(new URL('../src/openapi.d.ts', import.meta.url), 'utf8');
  assert.ok(committed === readFileSync(out, 'utf8'),
    `clients/ts/src/openapi.d.ts is stale (docs/openapi.json or the generator changed): run \`${command}\` and commit it`);
});

test('index.d.ts takes every wire type from openapi.d.ts', () => {
  const schemas = [...readFileSync(new URL('../src/openapi.d.ts', import.meta.url), 'utf8')
    .matchAll(/^ {8}(\w+): /gm)].map((m) => m[1]);
  assert.ok(schemas.includes('AgentResult') && schemas.includes('Problem'), `schemas of openapi.d.ts: ${schemas}`);
  // A hand-written interface would be a second copy of a wire type.
  assert.deepEqual([...dts.matchAll(/^export interface (\w+)/gm)].map((m) => m[1]).sort(), ['CallOptions', 'ClientOptions']);
  for (const name of ['TaskSpec', 'AgentResult', 'GroupResult', 'RunResult', 'RunStatus', 'RunProgress', 'RunPage',
    'RunEvent', 'RuntimeEvent', 'Usage', 'ToolDescriptor', 'RuntimeStats', 'Problem', 'ErrorInfo', 'StreamLine',
    'WaitRequest', 'ResumeRequest']) {
    assert.match(dts, new RegExp(`^export type ${name} = Schemas\\['${name}'\\];`, 'm'), name);
  }
});
