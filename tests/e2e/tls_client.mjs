// The official openai client over HTTPS against `pagellm serve --ssl-certfile/--ssl-keyfile`
// (tests/e2e/tls_test.sh runs it with NODE_EXTRA_CA_CERTS = the test's self-signed certificate).
// Usage: node tls_client.mjs BASE_URL   (e.g. https://127.0.0.1:8443/v1)
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const { default: OpenAI } = await import(path.join(here, '..', 'js', 'node_modules', 'openai', 'index.mjs'));
const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'none' });
const models = await client.models.list();
if (!models.data.length) throw new Error('no models');
const done = await client.completions.create({
  model: models.data[0].id, prompt: 'Once upon a time', max_tokens: 8, temperature: 0,
});
if (!done.choices[0].text) throw new Error('empty completion');
let streamed = '';
const stream = await client.completions.create({
  model: models.data[0].id, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true,
});
for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
if (streamed !== done.choices[0].text) throw new Error(`streamed '${streamed}' != '${done.choices[0].text}'`);
console.log(`ok: openai client over TLS: '${done.choices[0].text}'`);
