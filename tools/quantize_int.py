#!/usr/bin/python3
"""Quantize a Hugging Face Llama-family checkpoint to INT4 / INT8 weights (RTN, GPTQ or AWQ) in the
formats pagellm and vLLM load: AutoAWQ GEMM, AutoGPTQ / GPTQModel (v1 and gptq_v2), compressed-tensors
pack-quantized (W4A16, W8A16) and int-quantized (W8A8), and auto-round's GPTQ- and AWQ-packed exports.

Python 3 + numpy only (safetensors, the tokenizer and the calibration forward are quantize_fp8.py's;
the rest is tools/intq/). Embeddings, norms and lm_head keep the source dtype (AWQ rescales norms).

  /usr/bin/python3 tools/quantize_int.py --format gptq --method gptq --act-order SRC OUT
  /usr/bin/python3 tools/quantize_int.py --format awq --method awq --dequantize-check SRC OUT
  /usr/bin/python3 tools/quantize_int.py --format ct-w8a8 --method rtn --eval-ppl tests/data/heldout_python.txt SRC OUT
  /usr/bin/python3 tools/quantize_int.py --method none --eval-ppl tests/data/heldout_python.txt SRC   (bf16)

Every weight dequantizes to (q - z) * s in float32 with the stored (F16 / BF16) scale widened; the
formats are described in tools/intq/packing.py.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_fp8 as q8  # noqa: E402
from intq import awq, gptq, grid as gridmod, model as modelmod, packing, unpack  # noqa: E402

METHODS = ("rtn", "gptq", "awq", "none")


class Options:
    """Everything a quantization run needs (the CLI's arguments, or the tests' own)."""

    def __init__(self, fmt, method="rtn", bits=None, group_size=None, sym=None, act_order=False,
                 static_groups=False, gptq_v2=False, damp=0.01, calibration_text=None, num_sequences=8,
                 seq_len=256, awq_grid=20, awq_clip=True):
        self.fmt, self.method = fmt, method
        self.bits = bits if bits is not None else (8 if fmt in ("ct-w8a16", "ct-w8a8") else 4)
        self.group_size = group_size if group_size is not None else (-1 if fmt == "ct-w8a8" else 128)
        self.sym = sym if sym is not None else fmt not in ("awq", "autoround-awq")
        self.act_order, self.static_groups, self.gptq_v2 = act_order, static_groups, gptq_v2
        self.damp, self.calibration_text = damp, calibration_text
        self.num_sequences, self.seq_len = num_sequences, seq_len
        self.awq_grid, self.awq_clip = awq_grid, awq_clip
        if gptq_v2 and fmt != "gptq":
            raise ValueError("--gptq-v2 applies to --format gptq only")
        if act_order and method != "gptq":
            raise ValueError("--act-order is a GPTQ option (--method gptq)")
        if act_order and packing.needs_trivial_g_idx(fmt):
            self.static_groups = True  # the format has no g_idx: groups must stay column // group_size


def linear_dtype(model, prefixes):
    return model.tensors[prefixes[0] + ".weight"].dtype


def quantize_linear(model, name, x, grid, opts):
    """Quantizes one weight on its inputs x; model.weights[name] holds the dequantized weight after."""
    w = model.w(name)
    if opts.method == "gptq":
        ql = gptq.gptq(w, x, grid, opts.act_order, opts.static_groups, opts.damp)
    elif opts.awq_clip and not name.endswith(("q_proj.weight", "k_proj.weight")):
        ql = awq.clipped_rtn(w, x, grid)
    else:
        ql = gridmod.rtn(w, grid)
    model.weights[name] = ql.dequantize()
    return ql


def quantize_layer(model, i, x, grid, opts, results):
    """Quantizes layer i group by group (q/k/v, o, gate/up, down), each on inputs computed with the
    groups before it already quantized; returns the layer's output on x [B, T, hidden]."""
    p = "model.layers.%d." % i
    if opts.method == "awq":
        awq.scale_layer(model, i, x, grid, opts.awq_grid)

    def group(stage, h):
        for lin in modelmod.GROUPS[stage]:
            results[p + lin] = quantize_linear(model, p + lin + ".weight", h, grid, opts)

    h = q8.rms_norm(x, model.w(p + "input_layernorm.weight"), model.eps)
    group("qkv", h)
    a = model.attention(p, h)
    group("o", a)
    x = x + a @ model.w(p + "self_attn.o_proj.weight").T
    h = q8.rms_norm(x, model.w(p + "post_attention_layernorm.weight"), model.eps)
    group("gateup", h)
    m = model.mlp_mid(p, h)
    group("down", m)
    return x + m @ model.w(p + "mlp.down_proj.weight").T


def quantize_model(src, opts, log=print):
    """(model with dequantized weights, {prefix: QuantizedLinear}, grid)."""
    model = modelmod.Model(src)
    prefixes = q8.linear_prefixes(model.tensors)
    if not prefixes:
        raise ValueError("%s: no q/k/v/o/gate/up/down_proj weights found" % src)
    for p in prefixes:
        if model.tensors[p + ".weight"].dtype not in ("BF16", "F16", "F32"):
            raise ValueError("%s.weight: dtype %s is not a 16/32-bit float" % (p, model.tensors[p + ".weight"].dtype))
    grid = packing.grid_for(opts.fmt, opts.bits, opts.group_size, opts.sym, linear_dtype(model, prefixes),
                            opts.gptq_v2)
    for p in prefixes:
        packing.check_shape(opts.fmt, grid, p + ".weight", model.tensors[p + ".weight"].shape)
    results = {}
    if opts.method == "rtn":
        for p in prefixes:
            results[p] = gridmod.rtn(model.w(p + ".weight"), grid)
            model.weights[p + ".weight"] = results[p].dequantize()
        return model, results, grid
    text = opts.calibration_text
    if text is None:
        with open(modelmod.DEFAULT_CALIBRATION, encoding="utf-8") as f:
            text = f.read()
    ids = modelmod.calibration_ids(src, text, opts.num_sequences, opts.seq_len)
    log("calibrating %s on %d x %d tokens" % (opts.method, ids.shape[0], ids.shape[1]))
    x = model.embed(ids)
    for i in range(model.num_layers):
        x = quantize_layer(model, i, x, grid, opts, results)
    missing = sorted(set(prefixes) - set(results))
    if missing:
        raise ValueError("%s: linear layer outside model.layers.N: %s" % (src, missing[0]))
    return model, results, grid


def write_folder(src, out, model, results, grid, opts, log=print):
    quantized = {p + ".weight" for p in results}
    outputs = {n: t for n, t in model.tensors.items() if n not in quantized}
    for name in awq.folded_names(model):  # AWQ-rescaled norms, in the source dtype
        t = model.tensors[name]
        outputs[name] = packing.tensor(t.dtype, to_storage(model.weights[name], t.dtype))
    for p, ql in sorted(results.items()):
        outputs.update(packing.format_tensors(opts.fmt, p, ql, opts.gptq_v2))
    os.makedirs(out, exist_ok=True)
    for name in q8.COPY_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    cfg = dict(model.cfg)
    cfg["quantization_config"] = packing.quantization_config(
        opts.fmt, grid, opts.act_order, opts.static_groups, opts.gptq_v2, opts.method)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    q8.write_safetensors(os.path.join(out, "model.safetensors"), outputs, {"format": "pt"})
    if os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        os.remove(os.path.join(out, "model.safetensors.index.json"))
    log("wrote %s: %d linear layers, %s %d-bit group %d %s (%s), %d tensors" % (
        out, len(results), opts.fmt, grid.bits, grid.group_size, "sym" if grid.sym else "asym", opts.method,
        len(outputs)))


def to_storage(a, dtype):
    if dtype == "BF16":
        return gridmod.f32_to_bf16_bits(a)
    if dtype == "F16":
        return np.asarray(a, np.float16)
    return np.asarray(a, np.float32)


def dequantize_check(out, results, log=print):
    """Reloads `out` with the independent unpacker; returns the names whose weights differ (exactly)."""
    got = unpack.dequantize_folder(out, {p: ql.shape for p, ql in results.items()})
    bad = [p for p, ql in sorted(results.items()) if not np.array_equal(got[p], ql.dequantize())]
    log("dequantize check: %d of %d weights equal the quantizer's exactly" % (len(results) - len(bad), len(results)))
    return bad


def dequantized_record(results):
    """{prefix.weight: {shape, sha256 of float32 LE row-major bytes, sum, first 8 values}}."""
    rec = {}
    for p, ql in sorted(results.items()):
        d = np.ascontiguousarray(ql.dequantize(), dtype="<f4")
        rec[p + ".weight"] = {"shape": list(d.shape), "sha256": hashlib.sha256(d.tobytes()).hexdigest(),
                              "sum": float(d.sum(dtype=np.float64)), "first": [float(v) for v in d.reshape(-1)[:8]]}
    return rec


def eval_ppl(model, path, src, log=print):
    with open(path, encoding="utf-8") as f:
        ids = q8.Tokenizer(src).encode(f.read())
    t0 = time.time()
    ppl = modelmod.perplexity(model, ids)
    log("perplexity over %s: %.4f (%d scored tokens, %.1f s)" % (path, ppl, len(ids) - 1, time.time() - t0))
    return ppl


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Quantize a Hugging Face Llama-family checkpoint to INT4 / INT8.")
    ap.add_argument("src", help="source model folder (config.json + safetensors, bf16/f16/f32, tokenizer.json)")
    ap.add_argument("out", nargs="?", help="output folder (not with --method none)")
    ap.add_argument("--format", choices=packing.FORMATS, help="the checkpoint format to write")
    ap.add_argument("--method", choices=METHODS, default="rtn", help="rtn, gptq, awq; none: only --eval-ppl the source")
    ap.add_argument("--bits", type=int, choices=(4, 8), help="weight bits (default: 4; ct-w8a16 / ct-w8a8: 8)")
    ap.add_argument("--group-size", type=int, help="input columns per scale; -1: per channel (default 128; ct-w8a8: -1)")
    sym = ap.add_mutually_exclusive_group()
    sym.add_argument("--sym", dest="sym", action="store_true", default=None, help="symmetric (z = 2^(bits-1))")
    sym.add_argument("--asym", dest="sym", action="store_false", help="asymmetric, with zero points")
    ap.add_argument("--act-order", action="store_true", help="GPTQ: columns by descending Hessian diagonal (g_idx)")
    ap.add_argument("--static-groups", action="store_true", help="GPTQ: group grids fixed before any update")
    ap.add_argument("--gptq-v2", action="store_true", help="--format gptq: checkpoint_format gptq_v2 (zeros as is)")
    ap.add_argument("--damp", type=float, default=0.01, help="GPTQ dampening, a fraction of mean(diag H)")
    ap.add_argument("--calibration-file", help="calibration text (default tests/data/calibration_python.txt)")
    ap.add_argument("--calibration-sequences", type=int, default=8)
    ap.add_argument("--calibration-length", type=int, default=256, help="tokens per calibration sequence")
    ap.add_argument("--awq-grid", type=int, default=20, help="AWQ: alphas tried, i / N for i < N")
    ap.add_argument("--no-awq-clip", dest="awq_clip", action="store_false", help="AWQ: skip the clipping search")
    ap.add_argument("--dequantize-check", action="store_true",
                    help="reload the output with an independent unpacker; its weights must equal the quantizer's")
    ap.add_argument("--dequantized-json", action="store_true",
                    help="also write OUT/dequantized.json (sha256 / sum / first values of every dequantized weight)")
    ap.add_argument("--eval-ppl", metavar="FILE", help="teacher-forced perplexity of the (dequantized) model over FILE")
    args = ap.parse_args(argv)
    if args.method == "none":
        if args.out or args.format or not args.eval_ppl:
            ap.error("--method none evaluates the source: give --eval-ppl and neither OUT nor --format")
    elif not args.out or not args.format:
        ap.error("OUT and --format are required")
    if args.calibration_sequences < 1 or args.calibration_length < 2:
        ap.error("--calibration-sequences must be >= 1 and --calibration-length >= 2")
    return args


def run(args, log):
    if args.method == "none":
        eval_ppl(modelmod.Model(args.src), args.eval_ppl, args.src, log)
        return 0
    text = None
    if args.calibration_file:
        with open(args.calibration_file, encoding="utf-8") as f:
            text = f.read()
    opts = Options(args.format, args.method, args.bits, args.group_size, args.sym, args.act_order,
                   args.static_groups, args.gptq_v2, args.damp, text, args.calibration_sequences,
                   args.calibration_length, args.awq_grid, args.awq_clip)
    t0 = time.time()
    model, results, grid = quantize_model(args.src, opts, log)
    log("quantized %d linear layers in %.1f s" % (len(results), time.time() - t0))
    write_folder(args.src, args.out, model, results, grid, opts, log)
    if args.dequantized_json:
        with open(os.path.join(args.out, "dequantized.json"), "w") as f:
            json.dump(dequantized_record(results), f, indent=1)
            f.write("\n")
    if args.dequantize_check:
        bad = dequantize_check(args.out, results, log)
        if bad:
            log("FAIL: %s.weight dequantizes differently from the quantizer's weight" % bad[0])
            return 1
    if args.eval_ppl:
        model.dynamic_int8_inputs = args.format == "ct-w8a8"
        eval_ppl(model, args.eval_ppl, args.src, log)
    return 0


def main(argv=None):
    args = parse_args(argv)
    log = lambda msg: print("quantize_int: " + msg, file=sys.stderr)
    try:
        return run(args, log)
    except (ValueError, KeyError, OSError, np.linalg.LinAlgError) as e:
        log("error: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
