// Writes src/openapi.d.ts, the wire types of the client, from
// docs/openapi.json with the pinned openapi-typescript that `make deps`
// installs into .cache/ts (OPENAPI_TS names another binary). `make ts-types`
// runs it; test/types.test.js runs it into a temporary file and fails when
// the committed file differs.
//
//   node clients/ts/support/gen-types.js [output file]

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** The openapi-typescript binary: $OPENAPI_TS, else the pinned one in .cache/ts. */
export const generator = process.env.OPENAPI_TS || join(repoRoot, '.cache/ts/node_modules/.bin/openapi-typescript');

export const command = 'make deps ts-types';

// The generator's own version goes into the header, so a new pin in the
// Makefile makes the committed file stale until it is regenerated.
function version() {
  const out = execFileSync(generator, ['--version'], { encoding: 'utf8' });
  const m = out.match(/\d+\.\d+\.\d+\S*/);
  if (!m) throw new Error(`openapi-typescript --version said: ${out}`);
  return m[0];
}

/** Generates the types of docs/openapi.json into out. */
export function generate(out) {
  if (!existsSync(generator)) {
    throw new Error(`${generator} not found: run make deps (it installs the pinned openapi-typescript into .cache/ts)`);
  }
  // --empty-objects-unknown: RuntimeEvent's payload is an object the
  // event type's variant describes; Record<string, never> would make
  // every key of the variant never.
  execFileSync(generator, [join(repoRoot, 'docs/openapi.json'), '--empty-objects-unknown', '-o', out],
    { stdio: ['ignore', 'ignore', 'inherit'] });
  const header = `// Generated from docs/openapi.json by openapi-typescript ${version()}; do not\n` +
    `// edit: run \`${command}\` at the repository's root to regenerate.\n`;
  writeFileSync(out, header + readFileSync(out, 'utf8'));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  generate(resolve(process.argv[2] || join(repoRoot, 'clients/ts/src/openapi.d.ts')));
}
