#!/usr/bin/env bash
# Structured outputs and token controls on the GPU (issue 14): the GPU sampler against the CPU
# sampler with allowed-token masks and logit_bias (cuda_kernel_tests' sampler suite), then
# `pagellm generate --device cuda` on stories260K with a JSON schema, a regex or a choice per prompt
# line: every output must satisfy its constraint; how many greedy outputs equal the CPU backend's is
# reported. Last, an indication of what a JSON schema on every one of 64 requests costs: output
# tokens/s against the same requests unconstrained (whose lengths differ: the schema may finish early).
# usage: bash run_structured_gpu.sh BUNDLE   (BUNDLE: pagellm, cuda_kernel_tests (optional), stories260K, xz'd)
set -uo pipefail
SRC=$(cd "${1:?usage: run_structured_gpu.sh BUNDLE}" && pwd)
OUTDIR=${OUT:-./device-logs}
B=/tmp/pagellm-structured
rm -rf "$B" && cp -r "$SRC" "$B" && find "$B" -name "*.xz" -exec xz -d -f {} + && chmod +x "$B"/pagellm "$B"/cuda_kernel_tests 2>/dev/null
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
say() { echo "[${SECONDS}s] $*" | tee -a "$SUMMARY"; }
say "structured: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader) $(date -u +%FT%TZ)"
if [ -f "$B/cuda_kernel_tests" ]; then  # a bundle for the runner path only may leave it out
  timeout 300 "$B/cuda_kernel_tests" --filter sampler > "$OUTDIR/sampler.log" 2>&1
  say "GPU sampler vs CPU (exit $?):"; grep -E "sampler|kernel tests" "$OUTDIR/sampler.log" | tee -a "$SUMMARY"
fi

python3 - "$B/prompts.jsonl" <<'PY'
import json, sys
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
          "size": {"type": "integer", "minimum": 0, "maximum": 99},
          "tags": {"type": "array", "items": {"enum": ["io", "net", "math"]}, "maxItems": 3}},
          "required": ["name", "size", "tags"], "additionalProperties": False}
lines = []
for i, p in enumerate(["def parse_args(argv):\n", "class Config:\n", "import os\n", "for i in range(10):\n"]):
    lines.append({"prompt": p, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}})
    lines.append({"prompt": p, "guided_regex": "(def|class) [a-z_]{1,12}\\(\\)"})
    lines.append({"prompt": p, "guided_choice": ["alpha", "beta", "gamma delta"]})
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in lines))
PY
for dev in cuda cpu; do
  timeout 180 "$B/pagellm" generate --device $dev --model "$B/stories260K" --prompts-file "$B/prompts.jsonl" \
    --temperature 0 --max-tokens 160 --logprobs 2 --output "$OUTDIR/structured_$dev.jsonl" > "$OUTDIR/structured_$dev.log" 2>&1
  say "generate --device $dev (exit $?)"
done
python3 - "$B/prompts.jsonl" "$OUTDIR/structured_cuda.jsonl" "$OUTDIR/structured_cpu.jsonl" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, re, sys
specs = [json.loads(l) for l in open(sys.argv[1])]
gpu = [json.loads(l) for l in open(sys.argv[2])]
cpu = [json.loads(l) for l in open(sys.argv[3])]
valid = same = 0
for s, g, c in zip(specs, gpu, cpu):
    t = g["text"]
    if g["finish_reason"] != "stop":
        print("NOT FINISHED within max_tokens:", json.dumps(s)[:80], repr(t)[:120])
        ok = False
    elif "response_format" in s:
        v = json.loads(t); ok = set(v) == {"name", "size", "tags"} and 0 <= v["size"] <= 99 and len(v["name"]) <= 12
    elif "guided_regex" in s:
        ok = re.fullmatch(s["guided_regex"], t) is not None
    else:
        ok = t in s["guided_choice"]
    valid += ok
    same += g["token_ids"] == c["token_ids"]
    if not ok: print("INVALID:", json.dumps(s)[:80], repr(t)[:120])
print(f"GPU outputs valid: {valid}/{len(specs)}; identical to the CPU backend's: {same}/{len(specs)}")
PY

python3 - "$B" <<'PY'
import json, sys
schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]}
with open(sys.argv[1] + "/free.jsonl", "w") as f, open(sys.argv[1] + "/schema.jsonl", "w") as g:
    for i in range(64):
        p = f"def f{i}(x):\n"
        f.write(json.dumps({"prompt": p}) + "\n")
        g.write(json.dumps({"prompt": p, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}) + "\n")
PY
for kind in free schema; do
  [ $kind = free ] && eos=--ignore-eos || eos=
  timeout 120 "$B/pagellm" generate --device cuda --model "$B/stories260K" --prompts-file "$B/$kind.jsonl" \
    --temperature 0.8 --seed 1 --max-tokens 128 $eos --max-num-seqs 64 > "$OUTDIR/tput_$kind.log" 2>&1
  say "64 x 128 tokens, $kind (exit $?): $(tr '\r' '\n' < "$OUTDIR/tput_$kind.log" | grep -oE '[0-9]+/64 \[[0-9.]+s.*output: [0-9.]+ toks/s' | tail -1)"
done
