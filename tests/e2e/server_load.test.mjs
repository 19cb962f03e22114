// 1000 concurrent streaming requests against `pagellm serve` on this small machine: all complete, and
// greedy outputs equal the same prompts sent one at a time.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, postJson, metrics, metric, sleep } from './server_helpers.mjs';

let server;
before(async () => { server = await startServer(['--max-num-seqs', '256']); });
after(async () => { assert.equal((await server.stop()).code, 0); });

// A raw streaming request on its own socket; resolves with the concatenated text.
function streamText(port, agent, body) {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify({ ...body, stream: true });
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`HTTP ${res.statusCode}`));
        res.resume();
        return;
      }
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { buf += d; });
      res.on('end', () => {
        const events = buf.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
        if (events.at(-1) !== '[DONE]') return reject(new Error('stream did not end with [DONE]'));
        let text = '';
        for (const e of events.slice(0, -1)) {
          const chunk = JSON.parse(e);
          if (chunk.error) return reject(new Error(JSON.stringify(chunk.error)));
          text += chunk.choices?.[0]?.text ?? '';
        }
        resolve(text);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

test('1000 concurrent streaming requests complete and match one-at-a-time greedy outputs', { timeout: 600000 }, async () => {
  const words = ['cat', 'dog', 'sun', 'tree', 'boat', 'girl', 'boy', 'bird', 'fish', 'ball'];
  const prompts = [];
  for (let i = 0; i < 40; i++) prompts.push(`Once upon a time a ${words[i % 10]} saw a ${words[(i * 7 + 3) % 10]}`);
  const params = { max_tokens: 8, temperature: 0, ignore_eos: true };
  const solo = [];
  for (const prompt of prompts) {
    const r = await postJson(server.base, '/v1/completions', { prompt, ...params });
    assert.equal(r.status, 200);
    solo.push(r.json.choices[0].text);
  }
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const n = 1000;
  const started = Date.now();
  const results = await Promise.allSettled(
    Array.from({ length: n }, (_, i) => streamText(server.port, agent, { prompt: prompts[i % prompts.length], ...params })));
  const failures = results.filter((r) => r.status === 'rejected');
  assert.equal(failures.length, 0, `failures: ${failures.slice(0, 3).map((f) => f.reason).join('; ')}`);
  let mismatches = 0;
  results.forEach((r, i) => { if (r.value !== solo[i % prompts.length]) mismatches++; });
  assert.equal(mismatches, 0, 'batched greedy outputs equal one-at-a-time outputs');
  console.log(`# 1000 concurrent streams finished in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const deadline = Date.now() + 10000;
  for (;;) {
    const m = await metrics(server.base);
    if (metric(m, 'pagellm:num_requests_running') === 0 && metric(m, 'pagellm:kv_cache_usage_perc') === 0) break;
    if (Date.now() > deadline) assert.fail('engine not idle after the load');
    await sleep(50);
  }
});
