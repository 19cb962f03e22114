#!/usr/bin/env bash
# EAGLE speculation on one GPU (issue 13). The bundle (make_eagle_bundle.sh): pagellm, cuda_probe,
# the Llama-3.1-8B config and tokenizer; pycode-25M comes in a second folder (MODELS, the carry
# limit) or is already under /tmp/pagellm-keep from an earlier call; the EAGLE head is the
# checkout's tests/data/pycode-25M-eagle.
#   bash BUNDLE/run_eagle_gpu.sh BUNDLE [MODELS] [STAGE...]   stages: same speed sampled cost batch (default: all)
# same:    pycode-25M greedy, 8 prompts x 128 tokens: no speculation, EAGLE k=4 (graphs) and EAGLE
#          k=4 --enforce-eager: the token ids must be the ones without speculation;
# speed:   batch 1, 512 greedy tokens, 4 prompts: tokens/s without speculation and with EAGLE
#          k = 2, 3, 4, acceptance per position;
# sampled: batch 1, T 0.8 / top-p 0.95, seed 0: without speculation and with EAGLE k=4;
# cost:    Llama-3.1-8B shapes (dummy target weights) with a random EAGLE head of its shapes made
#          here (torch): generate at batch 1 without and with EAGLE k=4 (the cost side: a random
#          head's drafts are rejected);
# batch:   the same shapes and head (made by the cost stage), bench throughput of 64 concurrent
#          requests (512 in, 128 out): no speculation, EAGLE k=4 with the adaptive switch (default:
#          no drafts while more than 256 / 5 = 51 seqs decode), and EAGLE always on.
set -uo pipefail
SRC=$(cd "${1:?usage: run_eagle_gpu.sh BUNDLE [MODELS] [STAGE...]}" && pwd)
shift
KEEP=/tmp/pagellm-keep
if [ -n "${1:-}" ] && [ -d "$1" ]; then
  rm -rf "$KEEP" && mkdir -p "$KEEP" && cp -r "$1"/. "$KEEP"/ && shift
  find "$KEEP" -name "*.xz" -exec xz -d -T4 {} +
fi
STAGES=" ${*:-same speed sampled cost batch} "
stage() { [[ "$STAGES" == *" $1 "* ]]; }
[ -f "$SRC/pagellm.xz" ] || [ -f "$SRC/pagellm" ] || { echo "models kept in $KEEP"; ls "$KEEP"; exit 0; }
. "$SRC/unpack_bundle.sh"
P=$B/pagellm
TARGET=$KEEP/pycode-25M
HEAD=$(cd "$SRC/../.." && pwd)/tests/data/pycode-25M-eagle
eagle() { echo "{\"method\": \"eagle\", \"model\": \"$2\", \"num_speculative_tokens\": $1}"; }
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-200)"

if stage same; then
  python3 - "$B/py_prompts.jsonl" <<'PY'
import json, sys
prompts = ["def parse_args(argv):\n", "class Config:\n    def __init__(self, path):\n",
           "import os\nimport sys\n\n\ndef main():\n", "def fibonacci(n):\n    if n < 2:\n",
           "for i in range(10):\n    print(", "with open(filename) as f:\n    for line in f:\n",
           "try:\n    import numpy as np\nexcept ImportError:\n", "def __repr__(self):\n        return"]
with open(sys.argv[1], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p, "max_tokens": 128}) + "\n")
PY
  run_same() {  # NAME [FLAGS...]
    local name=$1
    shift
    timeout 300 "$P" generate --model "$TARGET" --device cuda --prompts-file "$B/py_prompts.jsonl" \
      --temperature 0 --ignore-eos --output "$LOGS/same_$name.jsonl" "$@" > "$LOGS/same_$name.log" 2>&1
    echo "exit $?"
  }
  say "same, none: $(run_same none)"
  say "same, eagle k=4: $(run_same eagle --speculative-config "$(eagle 4 "$HEAD")") $(grep -o 'speculative decoding: .*' "$LOGS/same_eagle.log")"
  say "same, eagle k=4 eager: $(run_same eager --enforce-eager --speculative-config "$(eagle 4 "$HEAD")")"
  python3 - "$LOGS" <<'PY' | tee -a "$SUMMARY"
import json, sys
def ids(name):
    return [json.loads(l)["token_ids"] for l in open(f"{sys.argv[1]}/same_{name}.jsonl")]
base = ids("none")
for name in ("eagle", "eager"):
    try:
        got = ids(name)
        print(f"  {name}: {sum(a == b for a, b in zip(base, got))}/{len(base)} identical to no speculation")
    except Exception as e:
        print(f"  {name}: no output ({e})")
PY
  grep -iE "error|fail" "$LOGS"/same_*.log | head -5 | tee -a "$SUMMARY"
fi

edit=$'def moving_average(values, window):\n    """Return the moving averages of values over window."""\n    if window <= 0:\n        raise ValueError("window must be positive")\n    out = []\n    total = 0.0\n    for i, v in enumerate(values):\n        total += v\n        if i >= window:\n            total -= values[i - window]\n        if i >= window - 1:\n            out.append(total / window)\n    return out\n\n\n# The same function with type hints:\ndef moving_average(values: list, window: int) -> list:\n'
one() {  # LOG PROMPT [FLAGS...]: tokens/s and the acceptance line
  local log=$1 prompt=$2
  shift 2
  timeout 120 "$P" generate --model "$TARGET" --device cuda --prompt "$prompt" --max-tokens 512 \
    --ignore-eos "$@" > "$log.out" 2> "$log"
  echo "$(grep -o '[0-9.]* tokens/s' "$log" | tail -1) $(grep -o 'mean acceptance length.*' "$log")"
}
if stage speed; then
  i=0
  for prompt in $'import os\nimport sys\n\n\ndef main():\n' $'def parse_args(argv):\n' \
      $'class Config:\n    def __init__(self, path):\n' "$edit"; do
    i=$((i + 1))
    say "speed, prompt $i, none: $(one "$LOGS/speed_${i}_none.log" "$prompt" --temperature 0)"
    for k in 2 3 4; do
      say "speed, prompt $i, eagle k=$k: $(one "$LOGS/speed_${i}_$k.log" "$prompt" --temperature 0 \
        --speculative-config "$(eagle $k "$HEAD")")"
      cmp -s "$LOGS/speed_${i}_none.log.out" "$LOGS/speed_${i}_$k.log.out" || say "  text differs from none"
    done
  done
fi

if stage sampled; then
  for spec in none 4; do
    flags=(--temperature 0.8 --top-p 0.95 --seed 0)
    [ "$spec" = none ] || flags+=(--speculative-config "$(eagle 4 "$HEAD")")
    say "sampled, $spec: $(one "$LOGS/sampled_$spec.log" $'import os\nimport sys\n\n\ndef main():\n' "${flags[@]}")"
  done
fi

if stage cost; then
  H8=$B/eagle-8b
  python3 - "$B/llama31-8b/config.json" "$H8" <<'PY' > "$LOGS/eagle8b.log" 2>&1
import json, os, sys, torch
from safetensors.torch import save_file
cfg = json.load(open(sys.argv[1])); out = sys.argv[2]; os.makedirs(out, exist_ok=True)
h, i = cfg["hidden_size"], cfg["intermediate_size"]
hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
g = torch.Generator(device="cuda").manual_seed(0)
def rnd(*shape):
    return ((torch.rand(*shape, generator=g, device="cuda") * 2 - 1) / shape[-1] ** 0.5).to(torch.bfloat16).cpu()
t = {"fc.weight": rnd(h, 2 * h)}
for name, shape in [("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)), ("self_attn.v_proj", (kv, h)),
                    ("self_attn.o_proj", (h, q)), ("mlp.gate_proj", (i, h)), ("mlp.up_proj", (i, h)),
                    ("mlp.down_proj", (h, i))]:
    t[f"layers.0.{name}.weight"] = rnd(*shape)
t["layers.0.post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
save_file(t, os.path.join(out, "model.safetensors"))
cfg["num_hidden_layers"] = 1
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
print("head of", sum(v.numel() for v in t.values()), "parameters")
PY
  say "cost: $(tail -1 "$LOGS/eagle8b.log")"
  for spec in none 4; do
    flags=(--model "$B/llama31-8b" --load-format dummy --device cuda --max-model-len 4096 \
      --prompt "The quick brown fox" --max-tokens 256 --ignore-eos --temperature 0)
    [ "$spec" = none ] || flags+=(--speculative-config "$(eagle 4 "$H8")")
    timeout 300 "$P" generate "${flags[@]}" > "$LOGS/cost_$spec.out" 2> "$LOGS/cost_$spec.log"
    say "cost, 8B shapes, $spec (exit $?): $(grep -o '[0-9.]* tokens/s' "$LOGS/cost_$spec.log" | tail -1) $(grep -o 'speculative decoding: .*' "$LOGS/cost_$spec.log")"
  done
  grep -iE "error" "$LOGS"/cost_*.log | head -3 | tee -a "$SUMMARY"
fi

if stage batch; then
  H8=$B/eagle-8b
  bench() {  # NAME [FLAGS...]: requests/s
    local name=$1
    shift
    timeout 300 "$P" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
      --max-model-len 4096 --num-prompts 64 --input-len 512 --output-len 128 --no-bound "$@" \
      > "$LOGS/batch_$name.log" 2>&1
    echo "exit $? $(grep -oE 'Throughput: [0-9.]+ requests/s' "$LOGS/batch_$name.log" | head -1) $(grep -o 'speculative decoding: [0-9].*' "$LOGS/batch_$name.log" | tail -1 | cut -c1-90)"
  }
  for r in 1 2; do
    say "batch 64, none (run $r): $(bench none)"
    say "batch 64, eagle k=4 adaptive (run $r): $(bench adaptive --speculative-config "$(eagle 4 "$H8")")"
  done
  say "batch 64, eagle k=4 always: $(bench always --speculative-config "{\"method\": \"eagle\", \"model\": \"$H8\", \"num_speculative_tokens\": 4, \"disable_by_batch_size\": 1000}")"
fi
