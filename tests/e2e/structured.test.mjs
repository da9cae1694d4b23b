// Structured output end to end: the official ollama and openai JavaScript clients ask for JSON mode and JSON
// schemas; every answer is parsed and validated with ajv (an independent JSON Schema validator).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { fixtureModel, startServer } from './server.mjs';
import { bounded, schemas } from './schemas.mjs';

let server, ollama, openai;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

before(async () => {
  server = await startServer();
  ollama = new Ollama({ host: server.url });
  openai = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused' });
  await server.create('tiny', fixtureModel('gemma4-e2b-tiny'), fixtureModel('gemma4-e2b-tiny-assistant'));
  await server.create('glm', fixtureModel('glm4-moe-lite-tiny'));
});
after(async () => { await server?.stop(); });

function check(schema, text, what) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${what}: not JSON: ${text}`);
  const ok = ajv.validate(schema, value);
  assert.ok(ok, `${what}: ${ajv.errorsText(ajv.errors)}\n${text}`);
  return value;
}

for (const [name, schema] of Object.entries(schemas)) {
  test(`ollama generate with the "${name}" schema, greedy and sampled, validates`, async () => {
    for (const options of [{ temperature: 0 }, { temperature: 1, seed: 7 }, { temperature: 0.8, top_k: 40, seed: 11 }]) {
      const r = await ollama.generate({
        model: 'tiny',
        prompt: `Answer with ${name} as JSON.`,
        format: bounded(schema),
        options: { ...options, num_predict: 1500 },
      });
      assert.equal(r.done_reason, 'stop', `${name} ${JSON.stringify(options)} ran out of tokens: ${r.response}`);
      check(schema, r.response, `${name} ${JSON.stringify(options)}`);
    }
  });
}

test('ollama chat with a schema and format "json"', async () => {
  const schema = schemas.get_weather;
  const r = await ollama.chat({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    format: bounded(schema),
    options: { temperature: 0, num_predict: 1500 },
  });
  check(schema, r.message.content, 'chat');
  const j = await ollama.chat({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Any JSON object' }],
    format: 'json',
    options: { temperature: 0.7, seed: 3, num_predict: 300 },
  });
  if (j.done_reason === 'stop') assert.equal(typeof JSON.parse(j.message.content), 'object');
  else assert.match(j.message.content, /^\{/);
});

test('greedy structured output is the same with and without speculation', async () => {
  for (const name of ['person', 'pydantic_model', 'tree']) {
    const ask = (draft) => ollama.generate({
      model: 'tiny',
      prompt: 'JSON please',
      format: bounded(schemas[name]),
      options: { temperature: 0, num_predict: 1500, ...(draft ? { draft_depth: draft } : { draft_num_predict: 0 }) },
    });
    const plain = await ask(0);
    const spec = await ask(3);
    assert.equal(spec.response, plain.response, name);
    assert.ok(spec.speculative && spec.speculative.rounds > 0, `${name}: no speculative rounds`);
  }
});

test('openai response_format json_schema (strict) and json_object', async () => {
  const schema = schemas.zod_export;
  const r = await openai.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Plan the steps.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'plan', strict: true, schema: bounded(schema) } },
    max_tokens: 1500,
    temperature: 0,
  });
  check(schema, r.choices[0].message.content, 'openai json_schema');
  const stream = await openai.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'A ticket.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'ticket', schema: bounded(schemas.pydantic_model) } },
    max_tokens: 1500,
    seed: 5,
    stream: true,
  });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  check(schemas.pydantic_model, text, 'openai streamed json_schema');
  const o = await openai.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'An object.' }],
    response_format: { type: 'json_object' },
    max_tokens: 300,
    seed: 2,
  });
  if (o.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(o.choices[0].message.content), 'object');
});

test('keywords vatic cannot honour and invalid schemas are refused with 400 naming them', async () => {
  const cases = [
    [{ type: 'object', patternProperties: { '^x': {} } }, /patternProperties/],
    [{ type: 'integer', multipleOf: 5 }, /multipleOf/],
    [{ type: 'array', items: { type: 'string' }, uniqueItems: true }, /uniqueItems/],
    [{ type: 'string', format: 'hostname' }, /hostname/],
    [{ type: 'string', pattern: '(?<=a)b' }, /lookaround/],
    [{ type: 'strin' }, /strin/],
    [{ $ref: '#/$defs/nope' }, /nope/],
    [{ if: { type: 'string' }, then: { maxLength: 3 } }, /"if"/],
    [{ oneOf: [{ type: 'number' }, { type: 'integer' }] }, /oneOf.*both admit integers/],
  ];
  for (const [schema, why] of cases) {
    await assert.rejects(
      ollama.generate({ model: 'tiny', prompt: 'x', format: schema }),
      (e) => e.status_code === 400 && why.test(e.message),
      JSON.stringify(schema),
    );
  }
  await assert.rejects(ollama.generate({ model: 'tiny', prompt: 'x', format: 'yaml' }), (e) => e.status_code === 400);
  await assert.rejects(
    openai.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } },
    }),
    (e) => e.status === 400 && /not/.test(e.message),
  );
});

test('openai tool_choice required / named: every call names a tool and its arguments validate', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: bounded(schemas.get_weather) } },
    { type: 'function', function: { name: 'web_search', parameters: bounded(schemas.web_search) } },
  ];
  const original = { get_weather: schemas.get_weather, web_search: schemas.web_search };
  for (const [tool_choice, seed] of [['required', 1], ['required', 2], [{ type: 'function', function: { name: 'web_search' } }, 3]]) {
    const r = await openai.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Use a tool.' }],
      tools,
      tool_choice,
      max_tokens: 1500,
      seed,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) {
      const name = call.function.name;
      assert.ok(name in original, name);
      if (typeof tool_choice === 'object') assert.equal(name, 'web_search');
      check(original[name], call.function.arguments, `tool ${name}`);
    }
  }
  await assert.rejects(
    openai.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'x' }], tools,
      tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e.status === 400 && /nope/.test(e.message),
  );
});

test('openai tool_choice with the GLM-4.7 chat format: key/value calls parse back to arguments that validate', async () => {
  const params = { get_weather: schemas.get_weather, web_search: schemas.web_search, adopt: schemas.discriminated_union };
  const tools = Object.entries(params).map(([name, p]) => ({ type: 'function', function: { name, parameters: bounded(p) } }));
  const seen = new Set();
  for (const [tool_choice, seed] of [['required', 1], ['required', 2], ['required', 4], [{ type: 'function', function: { name: 'adopt' } }, 3]]) {
    const r = await openai.chat.completions.create({
      model: 'glm',
      messages: [{ role: 'user', content: 'Use a tool.' }],
      tools,
      tool_choice,
      max_tokens: 1500,
      seed,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) {
      const name = call.function.name;
      assert.ok(name in params, name);
      if (typeof tool_choice === 'object') assert.equal(name, 'adopt');
      check(params[name], call.function.arguments, `glm tool ${name}`);
      seen.add(name);
    }
  }
  assert.ok(seen.has('adopt'));
  await assert.rejects(
    openai.chat.completions.create({
      model: 'glm',
      messages: [{ role: 'user', content: 'x' }],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: ['string', 'number'] } } } } }],
      tool_choice: 'required',
    }),
    (e) => e.status === 400 && /told apart/.test(e.message),
  );
});
