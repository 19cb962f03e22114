// Structured outputs through `pagellm serve` with the official openai client: response_format
// json_schema / json_object, vLLM's structured_outputs (regex, choice, grammar) and guided_* fields,
// streaming and not, n > 1; every output parses and validates. Hostile specs get a quick 400 naming
// the problem and the server keeps serving.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, openaiModule } from './server_helpers.mjs';
import { validate } from './json_schema_check.mjs';

const { default: OpenAI } = await import(openaiModule);

let server;
let client;
let model;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, 'SIGTERM exits 0');
});

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 10 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog', 'fish'] }, maxItems: 3 },
    code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{2}$' },
    happy: { type: 'boolean' },
  },
  required: ['name', 'age', 'code', 'happy'],
  additionalProperties: false,
};

function checkPerson(text) {
  const value = JSON.parse(text);
  validate(person, value);
  // Properties come in the order the schema declares them.
  const order = Object.keys(person.properties);
  const keys = Object.keys(value);
  assert.deepEqual(keys, order.filter((k) => keys.includes(k)), `property order: ${text}`);
}

test('response_format json_schema on chat completions, n = 3, sampled', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Describe a person.' }], max_tokens: 200, n: 3,
    temperature: 1.0, seed: 7,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop', c.message.content);
    checkPerson(c.message.content);
  }
});

test('response_format json_schema on completions, streamed equals non-streamed (greedy)', async () => {
  const params = {
    model, prompt: 'Once upon a time', max_tokens: 200, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person } },
  };
  const full = await client.completions.create(params);
  checkPerson(full.choices[0].text);
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...params, stream: true })) {
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, full.choices[0].text);
});

test('streamed chat json_schema with n = 2 reassembles into valid JSON per choice', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A person please' }], max_tokens: 200, n: 2, temperature: 0.9,
    seed: 3, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person } },
  });
  const texts = ['', ''];
  const finish = [null, null];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.delta?.content ?? '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 2; ++i) {
    assert.equal(finish[i], 'stop');
    checkPerson(texts[i]);
  }
});

test('response_format json_object', async () => {
  const r = await client.completions.create({
    model, prompt: 'JSON:', max_tokens: 64, temperature: 0.7, seed: 1, n: 2, response_format: { type: 'json_object' },
  });
  for (const c of r.choices) {
    assert.equal(c.text[0], '{');
    if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.text), 'object');
  }
});

test('structured_outputs regex / choice / grammar and the guided_* fields', async () => {
  const regex = '[A-Z][a-z]{1,8} (is|was) [0-9]{1,2}\\.';
  for (const body of [{ structured_outputs: { regex } }, { guided_regex: regex }]) {
    const r = await client.completions.create({ model, prompt: 'Tom', max_tokens: 40, temperature: 1, n: 2, ...body });
    for (const c of r.choices) assert.match(c.text, new RegExp(`^${regex}$`));
  }
  const choice = ['yes', 'no', 'not sure'];
  for (const body of [{ structured_outputs: { choice } }, { guided_choice: choice }]) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'ok?' }], max_tokens: 8, temperature: 1, n: 3, ...body,
    });
    for (const c of r.choices) assert.ok(choice.includes(c.message.content), c.message.content);
  }
  const grammar = 'root ::= "[" num ("," num){0,4} "]"\nnum ::= [1-9] [0-9]?';
  for (const body of [{ structured_outputs: { grammar } }, { guided_grammar: grammar }]) {
    const r = await client.completions.create({ model, prompt: 'list', max_tokens: 40, temperature: 0, ...body });
    assert.match(r.choices[0].text, /^\[[1-9][0-9]?(,[1-9][0-9]?){0,4}\]$/);
    const s = await client.completions.create({ model, prompt: 'list', max_tokens: 40, temperature: 0, stream: true, ...body });
    let text = '';
    for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, r.choices[0].text);
  }
  const guidedJson = await client.completions.create({ model, prompt: 'x', max_tokens: 200, guided_json: person, temperature: 0.5 });
  checkPerson(guidedJson.choices[0].text);
});

async function expect400(body, pattern, endpoint = '/v1/completions') {
  const t0 = Date.now();
  const r = await postJson(server.base, endpoint, { model, prompt: 'x', max_tokens: 8, ...body });
  const ms = Date.now() - t0;
  assert.equal(r.status, 400, `${r.status}: ${r.text.slice(0, 300)}`);
  assert.match(r.json.error.message, pattern);
  assert.ok(ms < 3000, `took ${ms} ms`);
}

test('hostile and malformed specs get a quick 400 naming the problem; the server keeps serving', async () => {
  let deep = { type: 'string' };
  for (let i = 0; i < 100; ++i) deep = { type: 'array', items: deep };
  await expect400({ guided_json: deep }, /deeper than/);
  let deepAnyOf = { type: 'string' };
  for (let i = 0; i < 70; ++i) deepAnyOf = { anyOf: [deepAnyOf] };
  await expect400({ guided_json: JSON.stringify(deepAnyOf) }, /nested deeper than 64 levels \(limit\)/);
  await expect400({ guided_json: { enum: Array.from({ length: 5000 }, (_, i) => `value-${i}`) } }, /more than 4096 values \(limit\)/);
  await expect400({ guided_json: { $ref: '#' } }, /matches no finite string/);
  await expect400({ guided_json: { $defs: { a: { $ref: '#/$defs/b' }, b: { anyOf: [{ $ref: '#/$defs/a' }] } }, $ref: '#/$defs/a' } },
    /matches no finite string/);
  await expect400({ guided_json: { type: 'object', description: 'x'.repeat(1 << 20) } }, /bytes \(limit\)/);
  await expect400({ guided_json: '{"type": ' }, /not valid JSON/);
  await expect400({ guided_json: { type: 'object', properties: { a: { type: 'strin' } } } }, /unknown type 'strin'/);
  await expect400({ guided_regex: '(a|b)\\1' }, /backreferences/);
  await expect400({ guided_regex: '(?<=a)b' }, /lookaround/);
  // Nested counted repetitions share their rules (linear size): this one is fine...
  const nested = await client.completions.create({ model, prompt: 'a', max_tokens: 4, temperature: 0,
    guided_regex: '((a{1000}){1000}){1000}' });
  assert.equal(nested.choices[0].text, 'aaaa');
  // ...while 25 distinct 10000-fold repetitions exceed the grammar size limit.
  await expect400({ guided_regex: [...'abcdefghijklmnopqrstuvwxy'].map((c) => `${c}{10000}`).join('') },
    /200000 elements \(limit\)/);
  await expect400({ guided_regex: 'x{99999999}' }, /repetition bound/);
  await expect400({ guided_grammar: 'root ::= root "a" | "b"' }, /left recursion/);
  await expect400({ guided_grammar: 'root ::= foo' }, /'foo' is used but not defined/);
  await expect400({ guided_grammar: 'root ::= "a" root' }, /matches no finite string/);
  await expect400({ guided_choice: [] }, /non-empty list/);
  await expect400({ guided_regex: 'a', guided_choice: ['a'] }, /conflicts/);
  await expect400({ response_format: { type: 'xml' } }, /response_format/);
  await expect400({ response_format: { type: 'json_schema' } }, /json_schema/);
  await expect400({ messages: [{ role: 'user', content: 'hi' }], prompt: undefined, structured_outputs: { regex: '(' } },
    /regex: missing '\)'/, '/v1/chat/completions');
  // A catastrophic-backtracking pattern is an ordinary regex here: linear-time matching serves it.
  const t0 = Date.now();
  const ok = await client.completions.create({ model, prompt: 'a', max_tokens: 12, temperature: 1, guided_regex: '(a+)+b' });
  assert.match(ok.choices[0].text, /^a*b?$/);
  assert.ok(Date.now() - t0 < 5000);
  // An exponential DFA is built lazily (and capped): served quickly too.
  const t1 = Date.now();
  const dfa = await client.completions.create({ model, prompt: 'a', max_tokens: 48, temperature: 1, seed: 5,
    guided_regex: '(a|b)*a(a|b){20}' });
  assert.match(dfa.choices[0].text, /^[ab]*$/);
  assert.ok(Date.now() - t1 < 5000);
  const after = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.ok(after.choices[0].text.length > 0);
});
