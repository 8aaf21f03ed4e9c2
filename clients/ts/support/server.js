// Starts a real `svc serve` for the tests: the binary is built from this
// repository (or taken from $SVC_BIN), on a free port, with a data
// directory and a copy of examples/specs of its own, plus the agents the
// tests need (slow, tick, writer, gated, asker).

import { spawn, execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

let built = null;

function svcBinary() {
  if (process.env.SVC_BIN) return process.env.SVC_BIN;
  if (built) return built;
  const dir = mkdtempSync(join(tmpdir(), 'svc-ts-bin-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const bin = join(dir, 'svc');
  execFileSync('go', ['build', '-o', bin, './cmd/svc'], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
  built = bin;
  return bin;
}

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/**
 * @param {{args?: string[], port?: number}} [opts] port: listen there
 *   (another server's, after it stopped), instead of on a free one
 * @returns {Promise<{url: string, port: number, pid: number, stop: () => Promise<void>, log: () => string}>}
 */
export async function startServer({ args = [], port: wantPort } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-ts-'));
  const bin = svcBinary();
  const specs = join(dir, 'specs');
  cpSync(join(repoRoot, 'examples/specs'), specs, { recursive: true });
  // An agent whose model call takes 5 s: for cancel, timeout and abort.
  writeFileSync(join(specs, 'agents', 'slow.yaml'),
    'version: 1\nname: slow\nmodel: test:echo\ninstructions: Wait, then repeat the input.\nmodel_settings: {latency_ms: 5000}\n');
  // An agent whose model call takes 20 ms: for a streamed gather that is
  // still running when the client leaves.
  writeFileSync(join(specs, 'agents', 'tick.yaml'),
    'version: 1\nname: tick\nmodel: test:echo\ninstructions: Repeat the input.\nmodel_settings: {latency_ms: 20}\n');
  // An agent that streams a fixed answer word by word, 30 ms apart, after
  // 300 ms (time to follow its run): for runStream and deltas.
  writeFileSync(join(specs, 'agents', 'writer.yaml'),
    'version: 1\nname: writer\nmodel: test:echo\nmodel_settings: {output: "one two three four five six", latency_ms: 300, stream_interval_ms: 30}\n');
  // Human in the loop: gated calls current_time, which needs a person's
  // approval; asker asks a question with ask_human. A submitted run of
  // either waits (the default SQLite store keeps the step log it resumes
  // from); a sync run of gated is an ApprovalRequiredError.
  writeFileSync(join(specs, 'agents', 'gated.yaml'),
    'version: 1\nname: gated\nmodel: test:echo\ntools: [current_time]\ntrust_level: low\napproval: [current_time]\nmodel_settings: {call_tools: [current_time]}\n');
  writeFileSync(join(specs, 'agents', 'asker.yaml'),
    'version: 1\nname: asker\nmodel: test:echo\nbuiltin_tools: [ask_human]\nmodel_settings: {call_tools: [ask_human]}\n');
  const port = wantPort ?? await freePort();
  const proc = spawn(bin, ['serve', '--specs', specs, '--host', '127.0.0.1', '--port', String(port),
    '--data-dir', join(dir, 'data'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  // Should the test process exit without stop() (process.exit, an
  // uncaught error), take the server with it. (Ctrl-C reaches the server
  // itself: it is in the terminal's process group.)
  const killOnExit = () => proc.kill('SIGKILL');
  process.on('exit', killOnExit);
  // The server's output, for the message of a failed start: its last
  // 64 KiB only, since it logs every event (a streamed gather of a
  // million tasks writes gigabytes).
  let log = '';
  const keep = (b) => {
    log += b;
    if (log.length > 128 << 10) log = log.slice(-(64 << 10));
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  const exited = new Promise((res) => proc.on('exit', res));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    }
    process.off('exit', killOnExit);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) {
      await stop();
      throw new Error(`svc serve exited (${proc.exitCode}):\n${log}`);
    }
    try {
      const r = await fetch(`${url}/healthz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`svc serve did not answer /healthz within 30 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url, port, pid: proc.pid, stop, log: () => log };
}
