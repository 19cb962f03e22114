// Encode speed of the JavaScript reference (@huggingface/tokenizers) on the same text as
// bench/tokenizer_bench.cpp, for a side-by-side number; optionally checks pagellm's ids for the whole
// text against it. Usage:
//   node bench/tokenizer_bench.mjs DIR FILE [IDS_JSON]
// IDS_JSON: output of `pagellm tokenize --tokenizer DIR --input-file FILE` to compare.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(root, "tests/js/package.json"));
const mod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;

const [dir, file, idsFile] = process.argv.slice(2);
if (!dir || !file) {
  console.error("usage: node bench/tokenizer_bench.mjs DIR FILE [IDS_JSON]");
  process.exit(2);
}
let t0 = performance.now();
const tokenizer = new Tokenizer(
  JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
);
const loadMs = performance.now() - t0;
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
let ids = tokenizer.encode(text, { add_special_tokens: false }).ids;  // warm-up
t0 = performance.now();
ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
const seconds = (performance.now() - t0) / 1e3;
console.log(`js reference ${dir}: load ${loadMs.toFixed(1)} ms; encode ${bytes} bytes -> ${ids.length} tokens, ` +
  `${seconds.toFixed(3)} s, ${(bytes / 1e6 / seconds).toFixed(2)} MB/s`);
if (idsFile) {
  const ours = JSON.parse(fs.readFileSync(idsFile, "utf8")).ids;
  const n = Math.min(ours.length, ids.length);
  let i = 0;
  while (i < n && ours[i] === ids[i]) i++;
  if (i === n && ours.length === ids.length) {
    console.log(`ids: identical (${ids.length} tokens)`);
  } else {
    console.log(`ids: FIRST DIFFERENCE at token ${i}: pagellm ${ours.slice(i, i + 8)} vs js ${ids.slice(i, i + 8)}`);
    process.exitCode = 1;
  }
}
