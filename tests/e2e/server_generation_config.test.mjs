// generation_config.json's sampling defaults reach API requests that leave those fields unset (as in
// vLLM), and max_new_tokens caps the length of a request without max_tokens. Runs on a copy of
// stories260K whose generation_config.json asks for greedy decoding and 7 new tokens.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson, modelDir } from './server_helpers.mjs';

let server;
let dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagellm-genconfig-'));
  for (const f of fs.readdirSync(modelDir)) {
    if (f !== 'generation_config.json') fs.symlinkSync(path.join(modelDir, f), path.join(dir, f));
  }
  fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({
    bos_token_id: 1, eos_token_id: 2, temperature: 0.0, top_p: 0.5, max_new_tokens: 7,
  }));
  server = await startServer([], dir);
});

after(async () => {
  await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('unset temperature and max_tokens come from generation_config.json', async () => {
  const prompt = 'Once upon a time';
  const implicit = await postJson(server.base, '/v1/completions', { prompt, seed: 1 });
  assert.equal(implicit.status, 200, implicit.text);
  assert.equal(implicit.json.usage.completion_tokens, 7, 'max_new_tokens caps the default length');
  assert.equal(implicit.json.choices[0].finish_reason, 'length');
  // Greedy by default: any seed gives the same text, equal to an explicit temperature-0 request.
  const other = await postJson(server.base, '/v1/completions', { prompt, seed: 2 });
  const explicit = await postJson(server.base, '/v1/completions', { prompt, temperature: 0, max_tokens: 7 });
  assert.equal(other.json.choices[0].text, implicit.json.choices[0].text);
  assert.equal(explicit.json.choices[0].text, implicit.json.choices[0].text);
});

test('request fields override generation_config.json', async () => {
  const prompt = 'Once upon a time';
  const r = await postJson(server.base, '/v1/completions', { prompt, max_tokens: 12, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.completion_tokens, 12);
  // Sampling at temperature 1 with top_p 1 must differ from greedy for some seed.
  const greedy = r.json.choices[0].text;
  let differs = false;
  for (let seed = 0; seed < 8 && !differs; ++seed) {
    const s = await postJson(server.base, '/v1/completions',
      { prompt, max_tokens: 12, temperature: 1, top_p: 1, seed });
    assert.equal(s.status, 200, s.text);
    differs = s.json.choices[0].text !== greedy;
  }
  assert.ok(differs, 'explicit temperature/top_p replace the defaults');
});
