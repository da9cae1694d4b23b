// Starts `vatic serve` on 127.0.0.1 and a free port with a temporary model store, for the client tests.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const binary = process.env.VATIC_BINARY;
const fixtures = process.env.VATIC_FIXTURES_DIR;
if (!binary || !fixtures) throw new Error('VATIC_BINARY and VATIC_FIXTURES_DIR must be set');

export const fixtureModel = (name) => join(fixtures, 'models', name);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function startServer() {
  const port = await freePort();
  const store = mkdtempSync(join(tmpdir(), 'vatic-e2e-'));
  const url = `http://127.0.0.1:${port}`;
  let log = '';
  const child = spawn(binary, ['serve'], {
    // The clients create models from the fixture folders, which the server must be told it may read.
    env: { ...process.env, VATIC_HOST: `127.0.0.1:${port}`, VATIC_MODELS: store, VATIC_CREATE_PATHS: join(fixtures, 'models') },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr.on('data', (d) => { log += d.toString(); });
  const deadline = Date.now() + 20000;
  for (;;) {
    try {
      const r = await fetch(url + '/');
      if (r.ok) break;
    } catch {}
    if (child.exitCode !== null || Date.now() > deadline) throw new Error('server did not start:\n' + log);
    await new Promise((r) => setTimeout(r, 50));
  }
  const server = {
    url,
    log: () => log,
    async create(model, from, draft) {
      const body = { model, from, stream: false };
      if (draft) body.draft = draft;
      const r = await fetch(url + '/api/create', { method: 'POST', body: JSON.stringify(body) });
      if (!r.ok) throw new Error(`create ${model}: ${r.status} ${await r.text()}`);
    },
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(store, { recursive: true, force: true });
    },
  };
  return server;
}
