// `pagellm serve` against malformed and hostile requests, disconnects, a full queue and SIGTERM.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, postJson, metrics, metric, sleep } from './server_helpers.mjs';

let server;
before(async () => { server = await startServer(); });
after(async () => { assert.equal((await server.stop()).code, 0); });

function assertError(r, status, what) {
  assert.equal(r.status, status, `${what}: status (body ${r.text?.slice(0, 200)})`);
  assert.ok(r.json && typeof r.json.error === 'object', `${what}: error object`);
  assert.equal(typeof r.json.error.message, 'string', `${what}: message`);
  assert.ok(r.json.error.message.length > 0, `${what}: message`);
  assert.equal(typeof r.json.error.type, 'string', `${what}: type`);
  assert.ok('param' in r.json.error && 'code' in r.json.error, `${what}: param and code`);
}

async function rawHttp(port, bytes) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => sock.end(bytes));
    let data = '';
    sock.on('data', (d) => { data += d; });
    sock.on('end', () => resolve(data));
    sock.on('error', reject);
  });
}

test('malformed and hostile requests get the right status and error object', async () => {
  const C = '/v1/completions';
  const H = '/v1/chat/completions';
  const user = [{ role: 'user', content: 'hi' }];
  const cases = [
    ['bad JSON', C, '{"prompt": "x"', 400],
    ['empty body', C, '', 400],
    ['body is an array', C, '[1,2,3]', 400],
    ['prompt is a number', C, { prompt: 42 }, 400],
    ['max_tokens is a string', C, { prompt: 'x', max_tokens: '5' }, 400],
    ['negative max_tokens', C, { prompt: 'x', max_tokens: -3 }, 400],
    ['huge max_tokens', C, { prompt: 'x', max_tokens: 1e12 }, 400],
    ['negative temperature', C, { prompt: 'x', temperature: -1 }, 400],
    ['temperature is a string', C, { prompt: 'x', temperature: 'hot' }, 400],
    ['top_p zero', C, { prompt: 'x', top_p: 0 }, 400],
    ['n=100000', C, { prompt: 'x', n: 100000 }, 400],
    ['n=0', C, { prompt: 'x', n: 0 }, 400],
    ['unknown model', C, { model: 'gpt-17', prompt: 'x' }, 404],
    ['empty messages', H, { messages: [] }, 400],
    ['messages not a list', H, { messages: 'hi' }, 400],
    ['unknown role', H, { messages: [{ role: 'wizard', content: 'x' }] }, 400],
    ['invalid UTF-8 bytes', C, Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 400],
    ['prompt over the context', C, { prompt: 'Once upon a time '.repeat(200), max_tokens: 4 }, 400],
    ['prompt plus max_tokens over the context', C, { prompt: 'Hi', max_tokens: 600 }, 400],
    ['deep JSON nesting', C, '{"prompt":' + '['.repeat(100000) + ']'.repeat(100000) + '}', 400],
    ['token id past the vocabulary', C, { prompt: [1, 2, 99999] }, 400],
    ['negative token id', C, { prompt: [1, -5] }, 400],
    ['logprobs too large', C, { prompt: 'x', logprobs: 50 }, 400],
    ['stop is a number', C, { prompt: 'x', stop: 7 }, 400],
    ['stream_options without stream', C, { prompt: 'x', stream_options: { include_usage: true } }, 400],
    ['top_logprobs without logprobs', H, { messages: user, top_logprobs: 3 }, 400],
    ['image content part', H, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400],
    ['presence_penalty out of range', C, { prompt: 'x', presence_penalty: 5 }, 400],
    ['empty prompt list', C, { prompt: [] }, 400],
    ['best_of below n', C, { prompt: 'x', n: 3, best_of: 2 }, 400],
    ['detokenize strings', '/detokenize', { tokens: ['a'] }, 400],
    ['stop_token_ids past the vocabulary', C, { prompt: 'x', stop_token_ids: [1e6] }, 400],
    ['min_tokens above max_tokens', C, { prompt: 'x', min_tokens: 9, max_tokens: 2 }, 400],
    ['chat message without content', H, { messages: [{ role: 'user' }] }, 400],
  ];
  assert.ok(cases.length >= 25);
  for (const [what, path, body, status] of cases) {
    assertError(await postJson(server.base, path, body), status, what);
  }
  // Routing errors.
  const get = await fetch(`${server.base}${C}`);
  assert.equal(get.status, 405);
  assert.equal(typeof (await get.json()).error.message, 'string');
  const missing = await fetch(`${server.base}/v2/nothing`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.type, 'not_found_error');
  // A 100 MB body is refused with 413 (and the client reads that answer, not a reset).
  const huge = Buffer.alloc(100 * 1024 * 1024, 0x20);
  assertError(await postJson(server.base, C, huge), 413, '100 MB body');
  // Garbage that is not HTTP at all.
  const raw = await rawHttp(server.port, 'THIS IS NOT HTTP\r\n\r\n');
  assert.match(raw, /^HTTP\/1\.1 400/);
  // The server still answers correctly afterwards.
  const ok1 = await postJson(server.base, C, { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(ok1.status, 200);
  assert.equal(ok1.json.usage.completion_tokens > 0, true);
  const ok2 = await postJson(server.base, C, { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(ok2.json.choices[0].text, ok1.json.choices[0].text);
  const m = await metrics(server.base);
  assert.ok(metric(m, 'pagellm:http_responses_total') !== undefined);
});

async function waitIdle(base) {
  const deadline = Date.now() + 15000;
  for (;;) {
    const m = await metrics(base);
    const running = metric(m, 'pagellm:num_requests_running');
    const waiting = metric(m, 'pagellm:num_requests_waiting');
    const kv = metric(m, 'pagellm:kv_cache_usage_perc');
    if (running === 0 && waiting === 0 && kv === 0) return;
    if (Date.now() > deadline) assert.fail(`not idle: running=${running} waiting=${waiting} kv=${kv}`);
    await sleep(50);
  }
}

test('a client that disconnects mid-stream has its request aborted', async () => {
  for (let i = 0; i < 3; i++) {
    const ac = new AbortController();
    const r = await fetch(`${server.base}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 480, ignore_eos: true, stream: true }),
    });
    const reader = r.body.getReader();
    await reader.read();  // the stream has started
    ac.abort();
  }
  // Non-streaming requests are aborted too when their client goes away.
  const ac = new AbortController();
  const pending = fetch(`${server.base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 480, ignore_eos: true }),
  }).catch(() => null);
  await sleep(30);
  ac.abort();
  await pending;
  await waitIdle(server.base);
  const m = await metrics(server.base);
  assert.ok(metric(m, 'pagellm:request_success_total') !== undefined);
});

test('a full queue answers 429', async () => {
  const small = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '0']);
  try {
    const ac = new AbortController();
    const r = await fetch(`${small.base}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ prompt: 'Hi', max_tokens: 500, ignore_eos: true, stream: true }),
    });
    await r.body.getReader().read();
    const busy = await postJson(small.base, '/v1/completions', { prompt: 'Hi', max_tokens: 2 });
    assertError(busy, 429, 'queue full');
    ac.abort();
    await waitIdle(small.base);
    assert.equal((await postJson(small.base, '/v1/completions', { prompt: 'Hi', max_tokens: 2 })).status, 200);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

// Opens a stream and resolves once its first bytes arrived, with {events}: a promise of all payloads.
async function openStream(base, body) {
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  const reader = r.body.getReader();
  const first = await reader.read();
  const rest = (async () => {
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  })();
  return { events: rest };
}

test('SIGTERM drains in-flight requests, then exits 0', async () => {
  const s = await startServer(['--shutdown-timeout', '30']);
  const stream = await openStream(s.base, { prompt: 'Hi', max_tokens: 500, ignore_eos: true });
  s.proc.kill('SIGTERM');
  const list = await stream.events;
  assert.equal(list.at(-1), '[DONE]');
  const finishes = list.slice(0, -1).map((e) => JSON.parse(e)).flatMap((c) => c.choices ?? []).map((c) => c.finish_reason).filter(Boolean);
  assert.deepEqual(finishes, ['length'], 'the in-flight request ran to completion');
  const { code } = await s.exited;
  assert.equal(code, 0);
  await assert.rejects(fetch(`${s.base}/health`), 'no longer accepting');

  const t = await startServer(['--shutdown-timeout', '0']);
  const cut = await openStream(t.base, { prompt: 'Hi', max_tokens: 500, ignore_eos: true });
  t.proc.kill('SIGTERM');
  const cutList = await cut.events;
  assert.equal(cutList.at(-1), '[DONE]');
  assert.equal((await t.exited).code, 0);
});
