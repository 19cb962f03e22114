// /v1/embeddings through the official openai client (issue 19): `pagellm serve --runner pooling`
// on stories260K answers a batch of strings and of token ids with unit-norm vectors of the model's
// hidden size, the same vector for the same input however it is batched or encoded (base64 of
// little-endian float32), `dimensions` keeps the first N values renormalized; mean pooling differs
// from last-token pooling; a generating server refuses embeddings (and a pooling one generation);
// pycode-25M's vectors equal HF transformers' fp32 ones (a reference made on the GPU machine).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, openaiModule, pagellmBin, modelDir, repoRoot } from './server_helpers.mjs';

const { default: OpenAI } = await import(openaiModule);

let server;
let client;
before(async () => {
  server = await startServer(['--runner', 'pooling']);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0);
});

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const close = (a, b, tol = 1e-5) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= tol);

test('embeddings: batch, token ids, base64, dimensions', { timeout: 60000 }, async () => {
  const inputs = ['Once upon a time', 'The cat sat on the mat', 'Lily went to the park'];
  const batch = await client.embeddings.create({ model: 'stories260K', input: inputs, encoding_format: 'float' });
  assert.equal(batch.data.length, 3);
  assert.equal(batch.object, 'list');
  assert.ok(batch.usage.prompt_tokens > 0);
  for (const d of batch.data) {
    assert.equal(d.embedding.length, 64, 'stories260K hidden size');
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, 'normalized');
  }
  assert.ok(!close(batch.data[0].embedding, batch.data[1].embedding, 1e-3), 'different inputs differ');
  const solo = await client.embeddings.create({ model: 'stories260K', input: inputs[1], encoding_format: 'float' });
  assert.ok(close(solo.data[0].embedding, batch.data[1].embedding), 'batching does not change a vector');
  // The client's default encoding is base64 (decoded by the client into floats).
  const b64 = await client.embeddings.create({ model: 'stories260K', input: inputs[0] });
  assert.ok(close(b64.data[0].embedding, batch.data[0].embedding, 0), 'base64 carries the same floats');
  const raw = await fetch(`${server.base}/v1/embeddings`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ input: inputs[0], encoding_format: 'base64' }),
  }).then((r) => r.json());
  const bytes = Buffer.from(raw.data[0].embedding, 'base64');
  const floats = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
  assert.ok(close(floats, batch.data[0].embedding, 0), 'base64 is little-endian float32');
  const small = await client.embeddings.create({ model: 'stories260K', input: inputs[0], dimensions: 8, encoding_format: 'float' });
  assert.equal(small.data[0].embedding.length, 8);
  assert.ok(Math.abs(norm(small.data[0].embedding) - 1) < 1e-5, 'truncated and renormalized');
  // Token ids in, the same vector out as the text they encode.
  const tok = await fetch(`${server.base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: inputs[2] }),
  }).then((r) => r.json());
  const ids = await client.embeddings.create({ model: 'stories260K', input: [tok.tokens], encoding_format: 'float' });
  assert.ok(close(ids.data[0].embedding, batch.data[2].embedding), 'token ids == text');
});

test('embeddings: bad input and generation on a pooling server', { timeout: 30000 }, async () => {
  for (const body of [{}, { input: [] }, { input: [1.5] }, { input: 'x', dimensions: 0 },
                      { input: 'x', encoding_format: 'hex' }, { input: [[99999999]] }]) {
    const r = await fetch(`${server.base}/v1/embeddings`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal((await r.json()).error.type, 'invalid_request_error');
  }
  await assert.rejects(client.completions.create({ model: 'stories260K', prompt: 'x', max_tokens: 2 }),
    (e) => e.status === 400 && /--runner pooling/.test(e.message));
});

test('mean pooling and a generating server', { timeout: 60000 }, async () => {
  const mean = await startServer(['--runner', 'pooling', '--pooler-config', '{"pooling_type": "MEAN"}',
                                  '--max-num-batched-tokens', '4']);
  const gen = await startServer([]);
  try {
    const m = new OpenAI({ baseURL: `${mean.base}/v1`, apiKey: 'u', maxRetries: 0 });
    const input = 'Once upon a time there was a little girl';
    const a = await m.embeddings.create({ model: 'stories260K', input, encoding_format: 'float' });
    const b = await client.embeddings.create({ model: 'stories260K', input, encoding_format: 'float' });
    assert.ok(Math.abs(norm(a.data[0].embedding) - 1) < 1e-5);
    assert.ok(!close(a.data[0].embedding, b.data[0].embedding, 1e-3), 'mean != last-token pooling');
    const g = new OpenAI({ baseURL: `${gen.base}/v1`, apiKey: 'u', maxRetries: 0 });
    await assert.rejects(g.embeddings.create({ model: 'stories260K', input: 'x' }),
      (e) => e.status === 400 && /--runner pooling/.test(e.message));
  } finally {
    await mean.stop();
    await gen.stop();
  }
});

test('pagellm embed (offline) gives the server\'s vectors', { timeout: 60000 }, async () => {
  const inputs = ['Once upon a time', 'The cat sat on the mat'];
  const r = spawnSync(pagellmBin(), ['embed', '--model', modelDir, '--input', inputs[0], '--input', inputs[1]],
    { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const offline = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  const online = await client.embeddings.create({ model: 'stories260K', input: inputs, encoding_format: 'float' });
  assert.equal(offline.length, 2);
  for (let i = 0; i < 2; i++) {
    assert.equal(offline[i].index, i);
    assert.ok(close(offline[i].embedding, online.data[i].embedding), `input ${i}`);
  }
  const bad = spawnSync(pagellmBin(), ['embed', '--model', modelDir], { encoding: 'utf8' });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--input/);
});

// pycode-25M's embeddings against HF transformers fp32 (last_hidden_state pooled by the last token and
// by the mean, L2-normalized), made on the GPU machine by tests/device/make_embedding_reference.py.
test('pycode-25M embeddings equal HF transformers fp32', { timeout: 90000 }, async () => {
  const ref = JSON.parse(fs.readFileSync(path.join(repoRoot, 'tests', 'data', 'hf_reference',
    'pycode_embeddings_ref.json'), 'utf8'));
  const pycode = path.resolve(modelDir, '..', 'pycode-25M');
  for (const [pooling, vectors] of [['LAST', ref.last], ['MEAN', ref.mean]]) {
    const srv = await startServer(['--runner', 'pooling', '--pooler-config', JSON.stringify({ pooling_type: pooling })],
      pycode);
    try {
      const c = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'u', maxRetries: 0 });
      const got = await c.embeddings.create({ model: 'pycode-25M', input: ref.token_ids, encoding_format: 'float' });
      assert.equal(got.data.length, vectors.length);
      for (let i = 0; i < vectors.length; i++) {
        const worst = Math.max(...vectors[i].map((x, j) => Math.abs(x - got.data[i].embedding[j])));
        assert.ok(worst < 2e-4, `${pooling} input ${i}: largest difference ${worst}`);
      }
    } finally {
      await srv.stop();
    }
  }
});
