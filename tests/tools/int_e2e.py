#!/usr/bin/python3
"""Helpers of tests/e2e/int_formats_test.sh (prompts and teacher-forced lines: tests/tools/fp8_e2e.py).

  report NAME=RESULTS.jsonl ...   fp8_e2e's table with the integer formats' limits (the first is bf16),
                                  then GPTQ and AWQ must beat RTN's perplexity at the same grid
  broken SRC_DIR OUT_DIR KIND     a copy of an integer checkpoint with one defect
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_e2e as e  # noqa: E402

q = e.q
# W4A16 g128 has no bound over bf16 (the acceptance compares methods); W8A16 / W8A8: +2%.
KIND = {"rtn-gptq": "w4", "gptq-gptq": "w4", "rtn-awq": "w4", "awq-awq": "w4",
        "ct-w8a16": "w8", "ct-w8a8": "w8"}
PPL_LIMIT = {"w4": None, "w8": 0.02}
TEACHER_MIN = {"w4": 0.85, "w8": 0.95}  # numpy estimate: 94-95% (W4), 99.6% (W8)
NEAR_TIE = {"w4": None, "w8": 0.5}
BEATS = (("gptq-gptq", "rtn-gptq"), ("awq-awq", "rtn-awq"))  # (method, RTN on the same grid)


def cmd_report(pairs):
    failed = e.cmd_report(pairs, KIND, PPL_LIMIT, TEACHER_MIN, NEAR_TIE)
    ppl = {p.split("=", 1)[0]: e.perplexity(e.read_lines(p.split("=", 1)[1])[len(e.PROMPTS)])[0] for p in pairs}
    for better, rtn in BEATS:
        if better in ppl and rtn in ppl:
            ok = ppl[better] < ppl[rtn]
            print("  %s %.4f %s %s %.4f" % (better, ppl[better], "<" if ok else ">=", rtn, ppl[rtn]))
            if not ok:
                print("FAIL: %s does not beat %s at W4A16 g128" % (better, rtn), file=sys.stderr)
                failed = 1
    return failed


def edit_tensors(folder, fn):
    path = os.path.join(folder, "model.safetensors")
    tensors, meta = q.read_safetensors(path)
    tensors = {k: q.Tensor(t.dtype, t.shape, t.data.copy()) for k, t in tensors.items()}
    fn(tensors)
    q.write_safetensors(path, tensors, meta)


def cmd_broken(src, out, kind):
    shutil.copytree(src, out)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if kind == "missing-qzeros":
        edit_tensors(out, lambda t: t.pop("model.layers.3.mlp.down_proj.qzeros"))
    elif kind == "missing-scales":
        edit_tensors(out, lambda t: t.pop("model.layers.1.self_attn.o_proj.scales"))
    elif kind == "bad-g-idx":
        def bad(t):
            g = t["model.layers.2.self_attn.k_proj.g_idx"]
            g.data[5] = 7  # the layer has 3 groups
        edit_tensors(out, bad)
    elif kind == "misshaped-scale":
        def half(t):
            name = "model.layers.4.mlp.gate_proj.weight_scale"
            s = t[name]
            t[name] = q.Tensor(s.dtype, [s.shape[0] // 2] + s.shape[1:], s.data[: s.data.size // 2].copy())
        edit_tensors(out, half)
    elif kind == "bits-3":
        cfg["quantization_config"]["bits"] = 3
    else:
        raise SystemExit("unknown defect " + kind)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


def main(argv):
    if argv[:1] == ["report"]:
        return cmd_report(argv[1:])
    if argv[:1] == ["broken"]:
        return cmd_broken(*argv[1:4])
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
