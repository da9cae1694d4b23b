// A corpus of JSON schemas for structured-output tests: hand-written ones exercising each supported keyword, and
// realistic ones shaped like tool parameters and agent outputs (OpenAI function calling, pydantic / zod exports).
export const schemas = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string' },
      age: { type: 'integer', minimum: 0, maximum: 130 },
      married: { type: 'boolean' },
      nickname: { type: ['string', 'null'] },
    },
    required: ['name', 'age', 'married'],
    additionalProperties: false,
  },
  get_weather: {
    type: 'object',
    properties: {
      location: { type: 'string', description: 'City and state, e.g. San Francisco, CA' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer', minimum: 1, maximum: 14 },
    },
    required: ['location', 'unit'],
  },
  web_search: {
    type: 'object',
    properties: {
      query: { type: 'string' },
      max_results: { type: 'integer', minimum: 1, exclusiveMaximum: 51 },
      filters: {
        type: 'object',
        properties: { site: { type: 'string' }, after: { type: 'string', format: 'date' } },
        additionalProperties: false,
      },
    },
    required: ['query'],
    additionalProperties: false,
  },
  calendar_event: {
    type: 'object',
    properties: {
      title: { type: 'string', minLength: 1, maxLength: 40 },
      start: { type: 'string', format: 'date-time' },
      end: { type: 'string', format: 'date-time' },
      attendees: {
        type: 'array',
        items: {
          type: 'object',
          properties: { email: { type: 'string', format: 'email' }, optional: { type: 'boolean' } },
          required: ['email'],
        },
        maxItems: 3,
      },
    },
    required: ['title', 'start', 'attendees'],
  },
  tree: {
    $defs: {
      node: {
        type: 'object',
        properties: {
          label: { type: 'string', maxLength: 10 },
          children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 1 },
        },
        required: ['label'],
        additionalProperties: false,
      },
    },
    $ref: '#/$defs/node',
  },
  tuple: {
    type: 'array',
    prefixItems: [{ type: 'number', minimum: -5, maximum: 5 }, { type: 'boolean' }, { enum: ['a', 'b', null, 3] }],
    items: false,
    minItems: 2,
  },
  codes: {
    type: 'object',
    properties: {
      sku: { type: 'string', pattern: '^[A-Z]{3}-\\d{4}$' },
      id: { type: 'string', format: 'uuid' },
      ip: { type: 'string', format: 'ipv4' },
      at: { type: 'string', format: 'time' },
      kind: { const: 'product' },
    },
    required: ['sku', 'id', 'kind'],
  },
  pydantic_model: {
    $defs: {
      Status: { enum: ['open', 'closed', 'pending'], title: 'Status', type: 'string' },
      Tag: {
        properties: { name: { title: 'Name', type: 'string' }, weight: { default: 1, title: 'Weight', type: 'number' } },
        required: ['name'],
        title: 'Tag',
        type: 'object',
      },
    },
    properties: {
      status: { $ref: '#/$defs/Status' },
      tags: { items: { $ref: '#/$defs/Tag' }, title: 'Tags', type: 'array', maxItems: 3 },
      score: { maximum: 1, minimum: 0, title: 'Score', type: 'number' },
      note: { anyOf: [{ type: 'string' }, { type: 'null' }], default: null, title: 'Note' },
    },
    required: ['status', 'tags', 'score'],
    title: 'Ticket',
    type: 'object',
  },
  zod_export: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    properties: {
      steps: {
        type: 'array',
        items: {
          type: 'object',
          properties: { action: { type: 'string', enum: ['read', 'write', 'run'] }, target: { type: 'string' } },
          required: ['action', 'target'],
          additionalProperties: false,
        },
        minItems: 1,
        maxItems: 3,
      },
      done: { type: 'boolean' },
    },
    required: ['steps', 'done'],
    additionalProperties: false,
  },
  discriminated_union: {
    $defs: {
      Cat: {
        type: 'object',
        properties: { pet_type: { const: 'cat', type: 'string' }, meows: { type: 'integer', minimum: 0, maximum: 10 } },
        required: ['pet_type', 'meows'],
        additionalProperties: false,
      },
      Dog: {
        type: 'object',
        properties: { pet_type: { const: 'dog', type: 'string' }, barks: { type: 'number', minimum: 0, maximum: 5 } },
        required: ['pet_type', 'barks'],
        additionalProperties: false,
      },
      Lizard: {
        type: 'object',
        properties: { pet_type: { enum: ['lizard', 'gecko'], type: 'string' }, scales: { type: 'boolean' } },
        required: ['pet_type'],
        additionalProperties: false,
      },
    },
    type: 'object',
    properties: {
      pet: {
        oneOf: [{ $ref: '#/$defs/Cat' }, { $ref: '#/$defs/Dog' }, { $ref: '#/$defs/Lizard' }],
        discriminator: { propertyName: 'pet_type' },
      },
      name: { type: 'string' },
      owner: { oneOf: [{ type: 'string' }, { type: 'null' }] },
    },
    required: ['pet', 'name'],
    additionalProperties: false,
  },
};

// The same schema with every free string bounded (maxLength 24) and every free array bounded (maxItems 3): the
// tiny random test models would otherwise wander in a string until the token budget ends. Output that matches
// the bounded schema matches the original one too, which is what the tests validate against.
export function bounded(s) {
  if (Array.isArray(s)) return s.map(bounded);
  if (s === null || typeof s !== 'object') return s;
  const o = {};
  for (const [k, v] of Object.entries(s)) o[k] = k === 'enum' || k === 'const' ? v : bounded(v);
  const types = [].concat(s.type ?? []);
  if (types.includes('string') && !s.pattern && !s.format && !s.enum && s.maxLength === undefined) o.maxLength = 24;
  if (types.includes('array') && s.maxItems === undefined) o.maxItems = 3;
  if (s.anyOf) o.anyOf = s.anyOf.map((x) => (x.type === 'string' && x.maxLength === undefined ? { ...x, maxLength: 24 } : bounded(x)));
  return o;
}
