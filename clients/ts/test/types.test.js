// index.d.ts and the error classes against what they describe: the
// values index.js exports, the methods of Client and RunHandle, and the
// error kinds of the server (the root package's errors.go).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
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
  for (const k of ['TopologyError', 'PayloadTooLargeError', 'UnsupportedMediaTypeError']) {
    assert.ok(mod.errorKinds[k].prototype instanceof mod.SpecValidationError, k);
  }
});
