// index.d.ts and the error classes against what they describe: the
// values index.js exports, the methods of Client and RunHandle, and the
// error kinds of the server (the root package's errors.go).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import * as mod from '../src/index.js';
import { repoRoot } from '../support/server.js';

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
