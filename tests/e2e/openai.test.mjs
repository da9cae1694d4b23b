// The official openai JavaScript client against vatic's /v1 endpoints.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { fixtureModel, startServer } from './server.mjs';

let server, client;

before(async () => {
  server = await startServer();
  await server.create('tiny', fixtureModel('gemma4-e2b-tiny'), fixtureModel('gemma4-e2b-tiny-assistant'));
  client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await server?.stop(); });

test('models', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.ok(ids.includes('tiny:latest'), ids.join(','));
  const m = await client.models.retrieve('tiny:latest');
  assert.equal(m.id, 'tiny:latest');
  await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
});

test('chat completion, not streamed', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens <= 8);
});

test('chat completion, streamed with usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 8,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(chunks >= 2);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.prompt_tokens > 0);
  assert.equal(typeof text, 'string');
});

test('tools and reasoning_effort are accepted', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    reasoning_effort: 'low',
    max_tokens: 4,
  });
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('errors are OpenAI-shaped', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'missing', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && typeof e.message === 'string',
  );
});
