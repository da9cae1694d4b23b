// The official ollama JavaScript client against vatic.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Ollama } from 'ollama';
import { Ollama as BrowserOllama } from 'ollama/browser';
import { fixtureModel, startServer } from './server.mjs';

let server, ollama;

before(async () => {
  server = await startServer();
  ollama = new Ollama({ host: server.url });
});
after(async () => { await server?.stop(); });

test('create streams progress and ends with success', async () => {
  // The Node build of ollama-js refuses local paths in `from` on the client side; the browser build sends them,
  // and vatic accepts a local safetensors directory there.
  const browser = new BrowserOllama({ host: server.url });
  const stream = await browser.create({
    model: 'tiny',
    from: fixtureModel('gemma4-e2b-tiny'),
    stream: true,
  });
  const statuses = [];
  for await (const p of stream) statuses.push(p.status);
  assert.equal(statuses.at(-1), 'success');
  await server.create('dense-base', fixtureModel('gemma4-dense-tiny'), fixtureModel('gemma4-dense-tiny-assistant'));
  // From an existing model, with a system prompt and parameters (the Node client's usual form).
  const r = await ollama.create({
    model: 'dense',
    from: 'dense-base',
    system: 'Be brief.',
    parameters: { temperature: 0.2, stop: ['<end>'] },
  });
  assert.equal(r.status, 'success');
  const info = await ollama.show({ model: 'dense' });
  assert.equal(info.system, 'Be brief.');
  assert.match(info.parameters, /temperature/);
});

test('list and show', async () => {
  const { models } = await ollama.list();
  const names = models.map((m) => m.name);
  assert.ok(names.includes('tiny:latest'), names.join(','));
  assert.ok(models[0].details.format === 'safetensors');
  const info = await ollama.show({ model: 'tiny' });
  assert.equal(typeof info.modelfile, 'string');
  assert.equal(info.details.format, 'safetensors');
});

test('generate, not streamed', async () => {
  const r = await ollama.generate({ model: 'tiny', prompt: 'Hello', options: { num_predict: 8 } });
  assert.equal(r.done, true);
  assert.equal(typeof r.response, 'string');
  assert.ok(r.eval_count <= 8);
  assert.ok(r.total_duration > 0);
  assert.ok(['stop', 'length'].includes(r.done_reason));
});

test('generate, streamed', async () => {
  const stream = await ollama.generate({ model: 'tiny', prompt: 'Hello', stream: true, options: { num_predict: 8 } });
  let last, text = '';
  for await (const part of stream) { text += part.response; last = part; }
  assert.equal(last.done, true);
  assert.ok(last.eval_count >= 1);
  assert.equal(typeof text, 'string');
});

test('chat, streamed and not', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }];
  const r = await ollama.chat({ model: 'dense', messages, options: { num_predict: 6, temperature: 0.7, seed: 3 } });
  assert.equal(r.message.role, 'assistant');
  assert.equal(r.done, true);
  const stream = await ollama.chat({ model: 'dense', messages, stream: true, options: { num_predict: 6 } });
  let last;
  for await (const part of stream) { assert.equal(part.message.role, 'assistant'); last = part; }
  assert.equal(last.done, true);
  assert.ok(last.prompt_eval_count > 0);
});

test('ps shows loaded models', async () => {
  const { models } = await ollama.ps();
  assert.ok(models.some((m) => m.name === 'tiny:latest'));
  for (const m of models) assert.ok(m.expires_at);
});

test('copy and delete', async () => {
  await ollama.copy({ source: 'tiny', destination: 'tiny-copy' });
  let names = (await ollama.list()).models.map((m) => m.name);
  assert.ok(names.includes('tiny-copy:latest'));
  await ollama.delete({ model: 'tiny-copy' });
  names = (await ollama.list()).models.map((m) => m.name);
  assert.ok(!names.includes('tiny-copy:latest'));
});

test('errors surface as ResponseError with the status', async () => {
  await assert.rejects(ollama.generate({ model: 'missing', prompt: 'x' }), (e) => {
    assert.equal(e.status_code, 404);
    assert.match(e.error, /not found/);
    return true;
  });
  await assert.rejects(ollama.generate({ model: 'tiny', prompt: 'x', options: { top_p: 7 } }), (e) => e.status_code === 400);
});
