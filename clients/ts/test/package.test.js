// The package as npm would publish it: packed with `npm pack`, installed
// into a new project from the tarball (offline: it has no dependencies),
// imported by its name from JavaScript, and type-checked by its name from
// TypeScript. Nothing is published.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as mod from '../src/index.js';
import { repoRoot } from '../support/server.js';

const pkgDir = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));

function hasNpm() {
  return spawnSync('npm', ['--version'], { encoding: 'utf8' }).status === 0;
}

test('package.json is publishable: not private, its files, exports and types, tests before publishing', () => {
  assert.equal(pkg.private, undefined, 'private: true stops npm publish');
  assert.equal(pkg.name, '@svc-dev/client');
  assert.equal(pkg.type, 'module');
  assert.deepEqual(pkg.files, ['src']);
  assert.deepEqual(pkg.exports['.'], { types: './src/index.d.ts', default: './src/index.js' });
  assert.equal(pkg.types, './src/index.d.ts');
  assert.match(pkg.scripts.prepublishOnly, /node --test/);
  assert.equal(pkg.publishConfig?.access, 'public'); // a scoped package is private on the registry otherwise
  assert.deepEqual(Object.keys(pkg.dependencies ?? {}), []);
});

test('npm pack ships src (every module it imports, its types) and nothing else', (t) => {
  if (!hasNpm()) {
    t.skip('npm not found');
    return;
  }
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: pkgDir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }));
  const files = packed.files.map((f) => f.path).sort();
  assert.ok(files.every((f) => f.startsWith('src/') || f === 'package.json' || f === 'README.md'), `packed: ${files}`);
  for (const f of ['src/index.js', 'src/index.d.ts', 'src/openapi.d.ts', 'src/errors.js', 'src/sse.js', 'src/ndjson.js']) {
    assert.ok(files.includes(f), `${f} not packed: ${files}`);
  }
  // Every relative import of a packed module is packed too.
  for (const f of files.filter((x) => /\.(js|d\.ts)$/.test(x))) {
    const src = readFileSync(join(pkgDir, f), 'utf8');
    for (const m of src.matchAll(/^(?:import|export)[^'"]*from '\.\/([\w.]+)'/gm)) {
      const target = `src/${m[1].replace(/\.js$/, f.endsWith('.d.ts') ? '.d.ts' : '.js')}`;
      assert.ok(files.includes(target), `${f} imports ./${m[1]}, not packed`);
    }
  }
});

test('installed from its tarball, it imports and type-checks by name', (t) => {
  if (!hasNpm()) {
    t.skip('npm not found');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'svc-ts-pkg-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const out = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: pkgDir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim().split('\n').at(-1);
  const app = join(dir, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', join(dir, out)], { cwd: app, stdio: 'pipe' });

  writeFileSync(join(app, 'main.js'), "import * as m from '@svc-dev/client';\nconsole.log(Object.keys(m).sort().join(','));\n");
  const keys = execFileSync(process.execPath, ['main.js'], { cwd: app, encoding: 'utf8' }).trim();
  assert.equal(keys, Object.keys(mod).sort().join(','));

  const tsc = process.env.SVC_TSC || join(repoRoot, '.cache/ts/node_modules/.bin/tsc');
  if (!existsSync(tsc)) {
    t.diagnostic('tsc not installed (make deps): the type check by name is skipped');
    return;
  }
  writeFileSync(join(app, 'main.ts'), [
    "import { Client, RegistryError, type AgentResult, type GatherItem } from '@svc-dev/client';",
    "const svc = new Client('http://127.0.0.1:8420');",
    "export async function main(): Promise<void> {",
    "  const r: AgentResult = await svc.run('echo', { input: 1 });",
    "  for await (const item of svc.gatherStream('echo', [{ input: 1 }])) { const i: GatherItem = item; console.log(i.index, r.success); }",
    "  try { await svc.health(); } catch (err) { if (err instanceof RegistryError) console.log(err.status); }",
    "}",
  ].join('\n'));
  // --skipLibCheck: the package's declarations are checked by
  // types.test.js; this checks that they are found by the package's name.
  const r = spawnSync(tsc, ['--noEmit', '--strict', '--skipLibCheck', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--lib', 'es2022,dom,dom.asynciterable', 'main.ts'], { cwd: app, encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
});
