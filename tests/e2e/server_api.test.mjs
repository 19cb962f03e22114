// `pagellm serve` end to end with the official openai client and raw HTTP: every endpoint, streaming
// vs non-streaming, n, logprobs, stop strings, seeds, token-id prompts, usage, auth.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, postJson, metrics, metric, readSse, openaiModule, modelDir } from './server_helpers.mjs';

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

test('info endpoints', async () => {
  assert.equal((await fetch(`${server.base}/health`)).status, 200);
  const version = await (await fetch(`${server.base}/version`)).json();
  assert.match(version.version, /^\d+\.\d+\.\d+/);
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, modelDir, 'the model as given, as vLLM names it');
  assert.equal(models.data[0].object, 'model');
  const m = await metrics(server.base);
  for (const name of ['pagellm:num_requests_running', 'pagellm:num_requests_waiting', 'pagellm:kv_cache_usage_perc',
    'pagellm:prefix_cache_queries_total', 'pagellm:prefix_cache_hits_total', 'pagellm:prompt_tokens_total',
    'pagellm:generation_tokens_total', 'pagellm:time_to_first_token_seconds_count',
    'pagellm:inter_token_latency_seconds_count', 'pagellm:e2e_request_latency_seconds_count']) {
    assert.notEqual(metric(m, name), undefined, `metric ${name}`);
  }
  const tok = await postJson(server.base, '/tokenize', { prompt: 'Once upon a time' });
  assert.equal(tok.status, 200);
  assert.equal(tok.json.count, tok.json.tokens.length);
  assert.equal(tok.json.tokens[0], 1, 'BOS first');
  assert.equal(tok.json.max_model_len, 512);
  const detok = await postJson(server.base, '/detokenize', { tokens: tok.json.tokens.slice(1) });
  assert.equal(detok.status, 200);
  assert.equal(detok.json.prompt, 'Once upon a time');
  const chatTok = await postJson(server.base, '/tokenize', { messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(chatTok.status, 200);
  assert.ok(chatTok.json.count > 5);
});

test('greedy streaming text equals non-streaming text', async () => {
  const params = { model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
  const full = await client.completions.create(params);
  assert.equal(full.object, 'text_completion');
  assert.match(full.id, /^cmpl-/);
  assert.equal(full.model, model);
  let streamed = '';
  let finish = null;
  let usage = null;
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(full.choices[0].text.length > 0);
  assert.equal(streamed, full.choices[0].text);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, full.usage.completion_tokens);
  assert.deepEqual(usage.prompt_tokens, full.usage.prompt_tokens);

  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  let chatStreamed = '';
  let role = null;
  for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0, stream: true })) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      chatStreamed += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(chatStreamed, chat.choices[0].message.content);
});

test('usage numbers', async () => {
  const prompt = 'The little dog';
  const tok = await postJson(server.base, '/tokenize', { prompt });
  const r = await client.completions.create({ model, prompt, max_tokens: 9, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.prompt_tokens, tok.json.count);
  assert.equal(r.usage.completion_tokens, 9);
  assert.equal(r.usage.total_tokens, tok.json.count + 9);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(r.choices[0].finish_reason, 'length');
  // A second identical long prompt can reuse cached prefix blocks.
  const long = 'Once upon a time there was a little girl named Lily who loved to play outside in the sun with her dog.';
  await client.completions.create({ model, prompt: long, max_tokens: 2, temperature: 0 });
  const again = await client.completions.create({ model, prompt: long, max_tokens: 2, temperature: 0 });
  // Prefix caching serves the full 16-token blocks of the repeated prompt.
  const cached = again.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= 16 && cached < again.usage.prompt_tokens, `cached_tokens ${cached}`);
});

test('n=3 and multiple prompts', async () => {
  const r = await client.completions.create({ model, prompt: 'A bird', n: 3, max_tokens: 6, temperature: 0.9, seed: 7, ignore_eos: true });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.usage.completion_tokens, 18);
  const greedy = await client.completions.create({ model, prompt: 'A bird', n: 3, max_tokens: 6, temperature: 0 });
  assert.equal(new Set(greedy.choices.map((c) => c.text)).size, 1, 'greedy samples agree');
  const multi = await client.completions.create({ model, prompt: ['A bird', 'A fish'], n: 2, max_tokens: 4, temperature: 0, ignore_eos: true });
  assert.equal(multi.choices.length, 4);
  assert.equal(multi.choices[0].text, greedy.choices[0].text.slice(0, multi.choices[0].text.length));
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], n: 3, max_tokens: 5 });
  assert.equal(chat.choices.length, 3);
});

test('logprobs', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0, logprobs: 2, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.top_logprobs.length, 5);
  assert.equal(lp.text_offset[0], 0);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 5; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-4);
  }
  const echo = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 3, temperature: 0, logprobs: 1, echo: true });
  assert.ok(echo.choices[0].text.startsWith('Once upon'));
  assert.equal(echo.choices[0].logprobs.token_logprobs[0], null);
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4,
    temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = chat.choices[0].logprobs.content;
  assert.ok(content.length >= 1);
  assert.equal(content[0].top_logprobs.length, 2);
  assert.equal(typeof content[0].token, 'string');
  assert.ok(Array.isArray(content[0].bytes));
});

test('stop strings and stop token ids', async () => {
  const base = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, ignore_eos: true });
  const text = base.choices[0].text;
  const stop = text.slice(12, 15);
  const cut = text.indexOf(stop);
  assert.ok(cut > 0);
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, cut));
  assert.equal(r.choices[0].stop_reason, stop);
  // Streaming honours the same stop.
  let streamed = '';
  for await (const chunk of await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: [stop], stream: true })) {
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, text.slice(0, cut));
  const ids = (await postJson(server.base, '/tokenize', { prompt: text, add_special_tokens: false })).json.tokens;
  const s = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop_token_ids: [ids[3]] });
  assert.equal(s.choices[0].finish_reason, 'stop');
  assert.ok(s.usage.completion_tokens <= 4);
});

test('seeds make sampling reproducible', async () => {
  const p = { model, prompt: 'The cat', max_tokens: 16, temperature: 1.0, ignore_eos: true };
  const a = await client.completions.create({ ...p, seed: 1234 });
  const b = await client.completions.create({ ...p, seed: 1234 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  const outs = new Set();
  for (const seed of [1, 2, 3, 4]) outs.add((await client.completions.create({ ...p, seed })).choices[0].text);
  assert.ok(outs.size > 1, 'different seeds give different samples');
});

test('token-id prompts', async () => {
  const prompt = 'Lily went to the park';
  const ids = (await postJson(server.base, '/tokenize', { prompt })).json.tokens;
  const byText = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0 });
  const byIds = await client.completions.create({ model, prompt: ids, max_tokens: 10, temperature: 0 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  assert.equal(byIds.usage.prompt_tokens, ids.length);
  const lists = await client.completions.create({ model, prompt: [ids, ids.slice(0, 3)], max_tokens: 4, temperature: 0 });
  assert.equal(lists.choices.length, 2);
});

test('auth on and off', async () => {
  const secured = await startServer(['--api-key', 'sk-e2e-secret']);
  try {
    const bad = new OpenAI({ baseURL: `${secured.base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401 && e.error?.type === 'authentication_error');
    const none = await fetch(`${secured.base}/v1/models`);
    assert.equal(none.status, 401);
    const body = await none.json();
    assert.equal(body.error.type, 'authentication_error');
    const good = new OpenAI({ baseURL: `${secured.base}/v1`, apiKey: 'sk-e2e-secret', maxRetries: 0 });
    const r = await good.completions.create({ model: 'stories260K', prompt: 'Hi', max_tokens: 3 });
    assert.equal(r.choices.length, 1);
    assert.equal((await fetch(`${secured.base}/health`)).status, 200, '/health stays open');
    assert.equal((await fetch(`${secured.base}/metrics`)).status, 200, '/metrics stays open');
    assert.equal((await postJson(secured.base, '/tokenize', { prompt: 'x' })).status, 401);
  } finally {
    assert.equal((await secured.stop()).code, 0);
  }
  // Auth off: any or no key works.
  assert.equal((await fetch(`${server.base}/v1/models`)).status, 200);
});

test('per-request log lines without prompts', async () => {
  await client.completions.create({ model, prompt: 'zebra-secret-prompt', max_tokens: 2 });
  const log = server.log();
  assert.match(log, /POST \/v1\/completions 200 prompt_tokens=\d+ completion_tokens=\d+ [\d.]+s/);
  assert.ok(!log.includes('zebra-secret-prompt'), 'prompts are not logged without --log-prompts');
});

test('raw SSE framing', async () => {
  const r = await fetch(`${server.base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Hi', max_tokens: 3, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const events = await readSse(r);
  assert.equal(events.at(-1), '[DONE]');
  for (const e of events.slice(0, -1)) JSON.parse(e);
});
