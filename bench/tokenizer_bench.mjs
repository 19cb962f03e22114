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
// CPU seconds of this process (user + system), comparable with tokenizer_bench's thread CPU time on a
// busy machine; JS's garbage collector threads are included.
const cpuSeconds = (start) => {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1e6;
};
let ids = tokenizer.encode(text, { add_special_tokens: false }).ids;  // warm-up
let cpu0 = process.cpuUsage();
t0 = performance.now();
ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
const seconds = (performance.now() - t0) / 1e3;
const cpu = cpuSeconds(cpu0);
console.log(`js reference ${dir}: load ${loadMs.toFixed(1)} ms (wall); encode ${bytes} bytes -> ${ids.length} tokens, ` +
  `${cpu.toFixed(3)} s CPU = ${(bytes / 1e6 / cpu).toFixed(2)} MB/s (wall ${seconds.toFixed(3)} s)`);
// The same text in ~4 KB pieces cut at line ends (closer to how a server sees prompts).
const chunks = [];
for (let start = 0; start < text.length;) {
  let end = Math.min(text.length, start + 4096);
  const newline = text.indexOf("\n", end);
  end = newline < 0 ? text.length : newline + 1;
  chunks.push(text.slice(start, end));
  start = end;
}
cpu0 = process.cpuUsage();
let chunkTokens = 0;
for (const c of chunks) chunkTokens += tokenizer.encode(c, { add_special_tokens: false }).ids.length;
const chunkCpu = cpuSeconds(cpu0);
console.log(`js reference, ${chunks.length} chunks of ~4 KB: ${chunkTokens} tokens, ${chunkCpu.toFixed(3)} s CPU = ` +
  `${(bytes / 1e6 / chunkCpu).toFixed(2)} MB/s`);
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
