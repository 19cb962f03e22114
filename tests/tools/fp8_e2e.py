#!/usr/bin/python3
"""Helpers of tests/e2e/fp8_formats_test.sh (prompts files in, `pagellm generate` JSONL results out).

  prompts HELDOUT OUT.jsonl                    greedy Python prompts + the held-out text for perplexity
  teacher MODEL BF16_RESULTS.jsonl PROMPTS.jsonl  adds teacher-forced lines: bf16's prompt + greedy tokens
  report NAME=RESULTS.jsonl ...                perplexity, greedy and teacher-forced agreement vs the first
  broken SRC_DIR OUT_DIR KIND                  a copy of an FP8 checkpoint with one defect
"""

import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import quantize_fp8 as q  # noqa: E402

MAX_TOKENS = 32
PROMPTS = [
    "def parse_args(argv):\n",
    "class Config:\n    def __init__(self, path):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "def read_json(path):\n    with open(path) as f:\n",
    "    def __repr__(self):\n        return ",
    "try:\n    import json\nexcept ImportError:\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "for name in sorted(os.listdir(root)):\n",
]
# Thresholds (see `report`): perplexity over bf16; teacher-forced argmax agreement; the largest bf16
# top-2 logprob margin (nats) at which a free-running greedy text may leave bf16's.
PPL_LIMIT = {"per-channel": 0.02, "block": 0.02, "per-tensor": 0.05, "kv-cache": 0.01}
TEACHER_MIN = {"per-channel": 0.95, "block": 0.95, "per-tensor": 0.93, "kv-cache": 0.95}
NEAR_TIE = {"per-channel": 0.25, "block": 0.25, "per-tensor": 0.5, "kv-cache": 0.25}
KIND = {"online": "per-channel", "compressed-tensors-channel": "per-channel", "fbgemm": "per-channel",
        "block": "block", "compressed-tensors-block": "block", "fp8-static": "per-tensor",
        "fp8-dynamic": "per-tensor", "compressed-tensors-tensor-static": "per-tensor",
        # --kv-cache-dtype fp8 alone (scales 1.0, calculated); with W8A8 and the checkpoint's scales.
        "kv-fp8": "kv-cache", "kv-fp8-calculated": "kv-cache", "kv-fp8-checkpoint": "per-channel"}


def write_lines(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cmd_prompts(heldout, out):
    lines = [{"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "logprobs": 2}
             for p in PROMPTS]
    with open(heldout, encoding="utf-8") as f:
        lines.append({"prompt": f.read(), "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1})
    write_lines(out, lines)


def cmd_teacher(model, bf16_results, prompts):
    """Teacher-forced lines: the prompt's ids (the tool's tokenizer, checked against the engine's
    prompt length) followed by bf16's greedy ids, scored with prompt_logprobs."""
    lines = read_lines(prompts)
    res = read_lines(bf16_results)
    tok = q.Tokenizer(model)
    for i, prompt in enumerate(PROMPTS):
        ids = tok.encode(prompt)
        if len(ids) != res[i]["num_prompt_tokens"]:
            raise SystemExit("prompt %d: %d tokens here, %d in pagellm" % (i, len(ids), res[i]["num_prompt_tokens"]))
        lines.append({"prompt_token_ids": ids + res[i]["token_ids"], "max_tokens": 1, "temperature": 0,
                      "prompt_logprobs": 1})
    write_lines(prompts, lines)


def perplexity(result):
    lps = [e["logprob"] for e in result["prompt_logprobs"] if e is not None]
    return math.exp(-sum(lps) / len(lps)), len(lps)


def teacher_agreement(result, bf16_result, bf16_greedy_ids):
    """Positions of bf16's greedy continuation where this model's argmax (teacher-forced on the same
    tokens) is bf16's token."""
    plp = result["prompt_logprobs"]
    n = len(bf16_greedy_ids)
    tail = plp[len(plp) - n:]
    if [e["token_id"] for e in tail] != bf16_greedy_ids:
        return None
    return sum(1 for e in tail if e["top"][0][0] == e["token_id"]), n


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def cmd_report(pairs, kinds=None, ppl_limit=None, teacher_min=None, near_tie=None):
    """Prints the table; returns 1 on a failure. kinds / limits: the FP8 tables unless given (another
    test's: tests/tools/int_e2e.py); a limit of None is not checked."""
    kinds, ppl_limit = kinds or KIND, ppl_limit or PPL_LIMIT
    teacher_min, near_tie = teacher_min or TEACHER_MIN, near_tie or NEAR_TIE
    runs = [(p.split("=", 1)[0], read_lines(p.split("=", 1)[1])) for p in pairs]
    base_name, base = runs[0]
    np_ = len(PROMPTS)
    base_ppl, ntok = perplexity(base[np_])
    failures = []
    print("teacher-forced perplexity of pycode-25M over tests/data/heldout_python.txt (%d scored tokens, CPU):" % ntok)
    print("  %-34s %9s %8s   %-49s %-20s   %s" % (
        "model", "ppl", "vs bf16", "greedy 32 tokens == bf16 (shared prefix/prompt)", "teacher-forced argmax",
        "bf16 top-2 margin where texts part"))
    for name, res in runs:
        ppl, n = perplexity(res[np_])
        if n != ntok:
            failures.append("%s: %d scored tokens, bf16 has %d" % (name, n, ntok))
        same, prefixes, agree, total, margins = 0, [], 0, 0, []
        for i in range(np_):
            a, b = res[i]["token_ids"], base[i]["token_ids"]
            if len(a) != MAX_TOKENS:
                failures.append("%s: prompt %d gave %d tokens, not %d" % (name, i, len(a), MAX_TOKENS))
            text = res[i]["text"]
            # A real continuation: mostly printable, some letters, not one token repeated throughout.
            printable = sum(c.isprintable() or c in "\n\t" for c in text) / max(1, len(text))
            if printable < 0.95 or sum(c.isalnum() for c in text) < 4 or len(set(a)) < 3:
                failures.append("%s: prompt %d: not a real continuation: %r" % (name, i, text))
            same += a == b
            prefixes.append(common_prefix(a, b))
            if a != b:
                at = prefixes[-1]
                top = base[i]["logprobs"][at]["top"]
                margins.append(round(top[0][1] - top[1][1], 3))
            if len(res) > np_ + 1:
                t = teacher_agreement(res[np_ + 1 + i], base[np_ + 1 + i], b)
                if t is None:
                    failures.append("%s: teacher line %d does not end with bf16's greedy tokens" % (name, i))
                else:
                    agree += t[0]
                    total += t[1]
        rel = ppl / base_ppl - 1
        rate = agree / total if total else float("nan")
        print("  %-34s %9.4f %+7.2f%%   %d/%d identical  %-34s %5.1f%% (%d/%d)   %s" %
              (name, ppl, 100 * rel, same, np_, str(prefixes), 100 * rate, agree, total, margins))
        if name == base_name:
            continue
        kind = kinds[name]
        # Perplexity: the brief's bound, +2% for per-channel and block-wise W8A8; per-tensor scales
        # are coarser (one scale per matrix), +5%.
        if ppl_limit[kind] is not None and rel > ppl_limit[kind]:
            failures.append("%s: perplexity %.4f is %.2f%% above bf16's %.4f (limit %.0f%%)" %
                            (name, ppl, 100 * rel, base_ppl, 100 * ppl_limit[kind]))
        # Greedy agreement, two ways. A free-running text leaves bf16's for good at the first step
        # where FP8's small logit error flips a near-tie, so "identical text on most prompts" is a
        # coin toss per prompt (here 4 of 8 for every format, on the GPU 3 of 8 at 64 tokens) and not
        # a robust assertion. What must hold instead: (1) on every prompt the text is identical to
        # bf16's, or it leaves bf16's only at a step where bf16 itself was nearly tied (its top-2
        # logprobs within NEAR_TIE nats; measured: at most 0.06 per-channel / block, 0.16
        # per-tensor), i.e. FP8 never overrides a confident bf16 choice; (2) teacher-forced on bf16's
        # own greedy tokens, where a flip does not compound, the argmax is bf16's token at >=
        # TEACHER_MIN of the 256 positions (measured 97.7-98.4%).
        confident = [m for m in margins if near_tie[kind] is not None and m >= near_tie[kind]]
        if confident:
            failures.append("%s: greedy text leaves bf16's where bf16's top-2 margin was %s nats (>= %.2f)" %
                            (name, confident, near_tie[kind]))
        if total and rate < teacher_min[kind]:
            failures.append("%s: teacher-forced argmax agrees with bf16 at %.1f%% of positions (< %.0f%%)" %
                            (name, 100 * rate, 100 * teacher_min[kind]))
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


def cmd_broken(src, out, kind):
    shutil.copytree(src, out)
    path = os.path.join(out, "model.safetensors")
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if kind == "missing-scale":
        tensors, meta = q.read_safetensors(path)
        del tensors["model.layers.3.mlp.down_proj.weight_scale"]
        q.write_safetensors(path, tensors, meta)
    elif kind == "misshaped-scale":
        tensors, meta = q.read_safetensors(path)
        name = "model.layers.2.self_attn.k_proj.weight_scale"
        s = tensors[name].to_f32()
        tensors[name] = q.f32_tensor(s[: s.shape[0] // 2])
        q.write_safetensors(path, tensors, meta)
    elif kind == "missing-kv-scale":
        tensors, meta = q.read_safetensors(path)
        del tensors["model.layers.5.self_attn.v_scale"]
        q.write_safetensors(path, tensors, meta)
    elif kind == "unknown-method":
        cfg["quantization_config"]["quant_method"] = "fp9_magic"
    elif kind == "int4":
        w = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
        w.update({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})
        cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"] = None
    else:
        raise SystemExit("unknown defect " + kind)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


def main(argv):
    if argv[:1] == ["prompts"]:
        return cmd_prompts(*argv[1:3])
    if argv[:1] == ["teacher"]:
        return cmd_teacher(*argv[1:4])
    if argv[:1] == ["report"]:
        return cmd_report(argv[1:])
    if argv[:1] == ["broken"]:
        return cmd_broken(*argv[1:4])
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
