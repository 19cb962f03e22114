// `pagellm serve --data-parallel-size 2` on the CPU: concurrent requests through the official openai
// client are spread over both engine replicas (per-replica /metrics series with engine="0"/"1" and
// their sum), greedy outputs equal the one-at-a-time ones, and a bad size is a one-line error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, metrics, openaiModule, pagellmBin, modelDir } from './server_helpers.mjs';

const { default: OpenAI } = await import(openaiModule);

let server;
let client;

before(async () => {
  server = await startServer(['--data-parallel-size', '2', '--num-threads', '1']);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, 'SIGTERM exits 0');
});

const names = ['Lily', 'Tom', 'Sue', 'Max', 'Ben', 'Anna', 'Sam', 'Mia'];
const prompts = names.map((n, i) => `${n} went to the ${i % 2 ? 'park' : 'sea'} and`);
const params = { model: 'stories260K', max_tokens: 12, temperature: 0 };

test('concurrent requests reach both replicas and match one-at-a-time outputs', { timeout: 120000 }, async () => {
  const solo = [];
  for (const prompt of prompts) solo.push((await client.completions.create({ prompt, ...params })).choices[0].text);
  const streamed = async (prompt) => {
    let text = '';
    for await (const chunk of await client.completions.create({ prompt, ...params, stream: true })) {
      text += chunk.choices[0]?.text ?? '';
    }
    return text;
  };
  const concurrent = await Promise.all(prompts.flatMap((p, i) => [
    client.completions.create({ prompt: p, ...params }).then((r) => r.choices[0].text),
    streamed(prompts[(i + 3) % prompts.length]),
  ]));
  prompts.forEach((_, i) => {
    assert.equal(concurrent[2 * i], solo[i], `prompt ${i}`);
    assert.equal(concurrent[2 * i + 1], solo[(i + 3) % prompts.length], `streamed prompt ${i}`);
  });

  const m = await metrics(server.base);
  const label = `model_name="${modelDir}"`;
  const finished = (engine) => m[`pagellm:request_success_total{${label}${engine},finished_reason="length"}`];
  const total = finished('');
  const e0 = finished(',engine="0"');
  const e1 = finished(',engine="1"');
  assert.equal(total, 3 * prompts.length);
  assert.ok(e0 > 0 && e1 > 0, `both replicas served requests (engine 0: ${e0}, engine 1: ${e1})`);
  assert.equal(e0 + e1, total);
  const prompt0 = m[`pagellm:prompt_tokens_total{${label},engine="0"}`];
  const prompt1 = m[`pagellm:prompt_tokens_total{${label},engine="1"}`];
  assert.ok(prompt0 > 0 && prompt1 > 0);
  assert.equal(m[`pagellm:prompt_tokens_total{${label}}`], prompt0 + prompt1);
  assert.ok(m[`pagellm:num_kv_blocks{${label},engine="1"}`] > 0);
  assert.equal((await fetch(`${server.base}/health`)).status, 200);
});

test('bad --data-parallel-size values fail with one line', () => {
  for (const [extra, pattern] of [
    [['--data-parallel-size', '0'], /--data-parallel-size: must be in \[1, 1024\]/],
    [['--data-parallel-size', '2', '--nnodes', '2'], /--data-parallel-size: .*--nnodes/],
  ]) {
    const r = spawnSync(pagellmBin(), ['serve', '--model', modelDir, '--port', '0', ...extra], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], pattern);
  }
});
