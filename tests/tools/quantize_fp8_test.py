#!/usr/bin/python3
"""Tests of tools/quantize_fp8.py: the e4m3 codec against an exhaustive table, the hand-written
safetensors reader/writer, and the seven output formats: formats that encode the same quantization
hold the same bytes, and every dequantized weight is within e4m3's half-ulp rounding bound of its
source.

  /usr/bin/python3 tests/tools/quantize_fp8_test.py            (pycode-25M from $PAGELLM_SHARED_DIR/models)
"""

import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("quantize_fp8", os.path.join(ROOT, "tools", "quantize_fp8.py"))
q = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(q)

SHARED = os.environ.get("PAGELLM_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
PYCODE = os.path.join(SHARED, "models", "pycode-25M")
QUIET = lambda msg: None


def reference_value(code):
    """e4m3fn from its definition, in float64, written independently of the tool's table."""
    sign = -1.0 if code & 0x80 else 1.0
    exp, man = (code >> 3) & 15, code & 7
    if exp == 15 and man == 7:
        return math.nan
    if exp == 0:
        return sign * math.ldexp(man, -9)
    return sign * math.ldexp(8 + man, exp - 10)


POSITIVE = [reference_value(c) for c in range(0x7F)]  # 0 .. 448, increasing


def reference_encode(x):
    """Nearest finite e4m3 value by search, ties to the even code, saturating."""
    if math.isnan(x):
        return 0xFF if math.copysign(1.0, x) < 0 else 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 448.0:
        return sign | 0x7E
    best, best_d = 0, math.inf
    for c, v in enumerate(POSITIVE):
        d = abs(v - a)
        if d < best_d or (d == best_d and c % 2 == 0):
            best, best_d = c, d
    return sign | best


class E4M3Test(unittest.TestCase):
    def test_table_is_the_format(self):
        self.assertEqual(q.E4M3_TABLE.dtype, np.float32)
        for c in range(256):
            want, got = reference_value(c), float(q.E4M3_TABLE[c])
            if math.isnan(want):
                self.assertTrue(math.isnan(got), c)
            else:
                self.assertEqual(got, want, hex(c))
        finite = q.E4M3_TABLE[~np.isnan(q.E4M3_TABLE)]
        self.assertEqual(len(finite), 254)
        self.assertEqual(float(finite.max()), 448.0)
        self.assertEqual(float(q.E4M3_TABLE[1]), 2.0 ** -9)
        self.assertEqual(float(q.E4M3_TABLE[8]), 2.0 ** -6)
        self.assertTrue(np.all(np.diff(q.E4M3_TABLE[:0x7F]) > 0))

    def test_every_finite_code_round_trips(self):
        codes = np.arange(256, dtype=np.uint8)
        finite = ~np.isnan(q.E4M3_TABLE)
        np.testing.assert_array_equal(q.e4m3_encode(q.E4M3_TABLE[finite]), codes[finite])
        # -0.0 keeps its sign; NaN stays NaN with its sign.
        self.assertEqual(int(q.e4m3_encode(np.float32(-0.0))), 0x80)
        self.assertEqual(int(q.e4m3_encode(np.float32(np.nan))), 0x7F)
        self.assertEqual(int(q.e4m3_encode(-np.float32(np.nan))), 0xFF)

    def test_midpoints_round_to_even(self):
        for c in range(0x7E):  # every pair of neighbouring non-negative finite values
            lo, hi = POSITIVE[c], POSITIVE[c + 1]
            mid = (lo + hi) / 2  # exact in float32: both have at most 4 significant bits
            self.assertEqual(float(np.float32(mid)), mid)
            even = c if c % 2 == 0 else c + 1
            for s in (1.0, -1.0):
                sign = 0x80 if s < 0 else 0
                m32 = np.float32(s * mid)
                self.assertEqual(int(q.e4m3_encode(m32)), sign | even, "midpoint of %r and %r" % (lo, hi))
                below = np.nextafter(m32, np.float32(0))
                above = np.nextafter(m32, np.float32(s * 1e9))
                self.assertEqual(int(q.e4m3_encode(below)), sign | c, "just below %r" % mid)
                self.assertEqual(int(q.e4m3_encode(above)), sign | (c + 1), "just above %r" % mid)

    def test_saturation(self):
        for v in (448.0, 449.0, 463.99, 464.0, 480.0, 1e4, 3e38, np.inf):
            self.assertEqual(int(q.e4m3_encode(np.float32(v))), 0x7E, v)
            self.assertEqual(int(q.e4m3_encode(np.float32(-v))), 0xFE, -v)

    def test_random_values_match_the_search(self):
        rng = np.random.default_rng(7)
        x = np.concatenate([rng.standard_normal(4000) * s for s in (1e-4, 3e-3, 0.05, 1, 30, 300, 1000)])
        x = x.astype(np.float32)
        want = np.array([reference_encode(float(v)) for v in x], dtype=np.uint8)
        np.testing.assert_array_equal(q.e4m3_encode(x), want)


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_layout(self):
        with tempfile.TemporaryDirectory() as d:
            bf = (np.arange(6, dtype=np.float32) - 2.5).view(np.uint32) >> 16
            tensors = {
                "b": q.Tensor("BF16", [2, 3], bf.astype(np.uint16)),
                "a.scale": q.f32_tensor(np.float32(0.5)),
                "c": q.Tensor("F8_E4M3", [3], np.array([1, 2, 0x7E], dtype=np.uint8)),
                "d": q.f32_tensor(np.ones((3, 1), np.float32)),
            }
            path = os.path.join(d, "m.safetensors")
            q.write_safetensors(path, tensors, {"format": "pt"})
            with open(path, "rb") as f:
                raw = f.read()
            n = int.from_bytes(raw[:8], "little")
            self.assertEqual((8 + n) % 8, 0)
            header = json.loads(raw[8:8 + n])
            self.assertEqual(header["__metadata__"], {"format": "pt"})
            self.assertEqual(header["a.scale"]["shape"], [])
            spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
            self.assertEqual(spans[0][0], 0)
            for (b0, e0), (b1, _) in zip(spans, spans[1:]):
                self.assertEqual(e0, b1)  # no gaps
            self.assertEqual(spans[-1][1], len(raw) - 8 - n)
            for k, v in header.items():
                if k != "__metadata__":
                    self.assertEqual(v["data_offsets"][0] % np.dtype(q.NP_DTYPES[v["dtype"]]).itemsize, 0, k)
            back, meta = q.read_safetensors(path)
            self.assertEqual(meta, {"format": "pt"})
            np.testing.assert_array_equal(back["b"].to_f32(), np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
            self.assertEqual(back["a.scale"].shape, [])
            self.assertEqual(float(back["a.scale"].to_f32()), 0.5)
            np.testing.assert_array_equal(back["c"].to_f32(), [2.0 ** -9, 2.0 ** -8, 448.0])


def synthetic_model(folder, shards=2):
    """A 2-layer Llama in bf16 whose projection shapes are not multiples of 128 (partial blocks),
    written sharded with an index, with pycode's tokenizer (vocab 32000) when it is available."""
    rng = np.random.default_rng(3)
    hidden, heads, kv, hd, inter, vocab = 160, 5, 1, 32, 200, 32000
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "intermediate_size": inter, "num_hidden_layers": 2, "vocab_size": vocab, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": False}

    def bf16(shape, scale, mean=0.0):
        a = (mean + rng.standard_normal(shape) * scale).astype(np.float32)
        a[tuple(0 for _ in shape)] = 40 * scale  # an outlier, as trained weights have
        return q.Tensor("BF16", list(shape), (a.view(np.uint32) >> 16).astype(np.uint16).reshape(-1))

    t = {"model.embed_tokens.weight": bf16((vocab, hidden), 0.02), "lm_head.weight": bf16((vocab, hidden), 0.02),
         "model.norm.weight": bf16((hidden,), 0.05, 1.0)}
    for layer in range(2):
        p = "model.layers.%d." % layer
        t[p + "input_layernorm.weight"] = bf16((hidden,), 0.05, 1.0)
        t[p + "post_attention_layernorm.weight"] = bf16((hidden,), 0.05, 1.0)
        t[p + "self_attn.q_proj.weight"] = bf16((heads * hd, hidden), 0.05)
        t[p + "self_attn.k_proj.weight"] = bf16((kv * hd, hidden), 0.05)
        t[p + "self_attn.v_proj.weight"] = bf16((kv * hd, hidden), 0.05)
        t[p + "self_attn.o_proj.weight"] = bf16((hidden, heads * hd), 0.05)
        t[p + "mlp.gate_proj.weight"] = bf16((inter, hidden), 0.05)
        t[p + "mlp.up_proj.weight"] = bf16((inter, hidden), 0.05)
        t[p + "mlp.down_proj.weight"] = bf16((hidden, inter), 0.05)
    os.makedirs(folder, exist_ok=True)
    names = sorted(t)
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        q.write_safetensors(os.path.join(folder, fname), {n: t[n] for n in part})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    if os.path.exists(os.path.join(PYCODE, "tokenizer.json")):
        shutil.copyfile(os.path.join(PYCODE, "tokenizer.json"), os.path.join(folder, "tokenizer.json"))
    return t


class FormatsTest(unittest.TestCase):
    """Quantizes one source into every format once; the tests compare the outputs."""

    src = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="quantize_fp8_test.")
        if cls.src is None:
            raise unittest.SkipTest("abstract")
        cls.prepare()
        cls.out, cls.sources = {}, {}
        for fmt in q.FORMATS:
            cls.out[fmt] = os.path.join(cls.tmp, fmt)
            cls.sources[fmt] = q.quantize_folder(cls.src_dir(), cls.out[fmt], fmt, log=QUIET)
        cls.tensors = {fmt: q.read_checkpoint(d) for fmt, d in cls.out.items()}
        cls.source_tensors = q.read_checkpoint(cls.src_dir())
        cls.configs = {}
        for fmt, d in cls.out.items():
            with open(os.path.join(d, "config.json")) as f:
                cls.configs[fmt] = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def src_dir(cls):
        return cls.src

    @classmethod
    def prepare(cls):
        pass

    def linears(self):
        return q.linear_prefixes(self.source_tensors)

    def test_seven_linears_per_layer(self):
        layers = {p.split(".")[2] for p in self.linears()}
        self.assertEqual(len(self.linears()), 7 * len(layers))

    def test_tensor_names_dtypes_shapes(self):
        for fmt in q.FORMATS:
            t = self.tensors[fmt]
            extra = {"weight_scale_inv" if fmt == "block" else "weight_scale"}
            if q.static_activations(fmt):
                extra.add("input_scale")
            want = set(self.source_tensors) | {p + "." + e for p in self.linears() for e in extra}
            self.assertEqual(set(t), want, fmt)
            for p in self.linears():
                n, k = self.source_tensors[p + ".weight"].shape
                self.assertEqual((t[p + ".weight"].dtype, t[p + ".weight"].shape), ("F8_E4M3", [n, k]), fmt)
                scale = t[p + ("." + "weight_scale_inv" if fmt == "block" else ".weight_scale")]
                self.assertEqual(scale.dtype, "F32")
                want_shape = {"compressed-tensors-channel": [n, 1], "fbgemm": [n, 1],
                              "compressed-tensors-tensor-static": [1], "fp8-static": [], "fp8-dynamic": [],
                              "block": [-(-n // 128), -(-k // 128)],
                              "compressed-tensors-block": [-(-n // 128), -(-k // 128)]}[fmt]
                self.assertEqual(scale.shape, want_shape, fmt + " " + p)
                if q.static_activations(fmt):
                    s = t[p + ".input_scale"]
                    self.assertEqual((s.dtype, s.shape), ("F32", [1] if fmt.startswith("compressed") else []))
                    self.assertGreater(float(s.to_f32().reshape(())), 0.0)

    def test_other_tensors_are_the_source_bytes(self):
        for fmt in q.FORMATS:
            for name, src in self.source_tensors.items():
                if name.endswith("_proj.weight"):
                    continue
                got = self.tensors[fmt][name]
                self.assertEqual((got.dtype, got.shape), (src.dtype, src.shape), name)
                self.assertEqual(got.data.tobytes(), src.data.tobytes(), name)

    def test_quantization_configs(self):
        qc = {f: c["quantization_config"] for f, c in self.configs.items()}
        g = qc["compressed-tensors-channel"]["config_groups"]["group_0"]
        self.assertEqual(qc["compressed-tensors-channel"]["format"], "float-quantized")
        self.assertEqual(g["targets"], ["Linear"])
        self.assertEqual(g["weights"], {"num_bits": 8, "type": "float", "strategy": "channel",
                                        "symmetric": True, "dynamic": False})
        self.assertEqual(g["input_activations"], {"num_bits": 8, "type": "float", "strategy": "token",
                                                  "dynamic": True, "symmetric": True})
        self.assertEqual(qc["compressed-tensors-channel"]["ignore"], ["lm_head"])
        g = qc["compressed-tensors-tensor-static"]["config_groups"]["group_0"]
        self.assertEqual((g["weights"]["strategy"], g["input_activations"]["strategy"],
                          g["input_activations"]["dynamic"]), ("tensor", "tensor", False))
        g = qc["compressed-tensors-block"]["config_groups"]["group_0"]
        self.assertEqual((g["weights"]["strategy"], g["weights"]["block_structure"]), ("block", [128, 128]))
        self.assertEqual((g["input_activations"]["strategy"], g["input_activations"]["group_size"],
                          g["input_activations"]["dynamic"]), ("group", 128, True))
        self.assertEqual(qc["fp8-static"], {"quant_method": "fp8", "activation_scheme": "static",
                                            "ignored_layers": ["lm_head"]})
        self.assertEqual(qc["fp8-dynamic"]["activation_scheme"], "dynamic")
        self.assertEqual(qc["fbgemm"], {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                                        "modules_to_not_convert": ["lm_head"]})
        self.assertEqual(qc["block"], {"quant_method": "fp8", "activation_scheme": "dynamic",
                                       "weight_block_size": [128, 128]})
        with open(os.path.join(self.src_dir(), "config.json")) as f:
            src_cfg = json.load(f)
        for fmt, c in self.configs.items():
            self.assertEqual({k: v for k, v in c.items() if k != "quantization_config"}, src_cfg, fmt)
            if os.path.exists(os.path.join(self.src_dir(), "tokenizer.json")):
                self.assertTrue(os.path.exists(os.path.join(self.out[fmt], "tokenizer.json")))
            self.assertEqual(sorted(n for n in os.listdir(self.out[fmt]) if n.endswith(".safetensors")),
                             ["model.safetensors"])

    def assert_same(self, a, b, a_scale, b_scale, same_scale_shape):
        for p in self.linears():
            ta, tb = self.tensors[a], self.tensors[b]
            self.assertEqual(ta[p + ".weight"].data.tobytes(), tb[p + ".weight"].data.tobytes(), p)
            sa, sb = ta[p + "." + a_scale], tb[p + "." + b_scale]
            if same_scale_shape:
                self.assertEqual(sa.shape, sb.shape)
            self.assertEqual(sa.data.tobytes(), sb.data.tobytes(), p)

    def test_channel_formats_are_identical(self):
        self.assert_same("compressed-tensors-channel", "fbgemm", "weight_scale", "weight_scale", True)

    def test_tensor_formats_are_identical(self):
        self.assert_same("fp8-static", "fp8-dynamic", "weight_scale", "weight_scale", True)
        self.assert_same("fp8-static", "compressed-tensors-tensor-static", "weight_scale", "weight_scale", False)
        for p in self.linears():
            self.assertEqual(self.tensors["fp8-static"][p + ".input_scale"].data.tobytes(),
                             self.tensors["compressed-tensors-tensor-static"][p + ".input_scale"].data.tobytes())

    def test_block_formats_are_identical(self):
        self.assert_same("block", "compressed-tensors-block", "weight_scale_inv", "weight_scale", True)

    def test_dequantized_weights_within_half_ulp(self):
        for fmt in q.FORMATS:
            _, worst_rel, violations = q.dequantize_check(self.out[fmt], fmt, self.sources[fmt], log=QUIET)
            self.assertEqual(violations, 0, fmt)
            # Largest possible error: half an ulp in the top binade (16 of 448) of the group's amax.
            self.assertLessEqual(worst_rel, 16.0 / 448 * (1 + 1e-5), fmt)

    def test_group_amax_maps_to_448(self):
        # Each scale group's largest weight becomes +-448 (code 0x7E / 0xFE): the full range is used.
        for fmt in ("compressed-tensors-channel", "fp8-dynamic", "block"):
            scheme = q.weight_scheme(fmt)
            for p in self.linears()[:7]:
                codes = self.tensors[fmt][p + ".weight"]
                c = codes.data.reshape(codes.shape) & 0x7F
                if scheme == "channel":
                    top = c.max(axis=1)
                elif scheme == "tensor":
                    top = c.max(keepdims=True)
                else:
                    n, k = c.shape
                    pad = np.zeros((-(-n // 128) * 128, -(-k // 128) * 128), np.uint8)
                    pad[:n, :k] = c
                    top = pad.reshape(pad.shape[0] // 128, 128, pad.shape[1] // 128, 128).max(axis=(1, 3))
                self.assertTrue(np.all(top == 0x7E), fmt + " " + p)

    def test_static_input_scales_cover_calibration(self):
        # input_scale = amax / 448 of a real forward pass: q/k/v share an input, as do gate/up.
        t = self.tensors["fp8-static"]
        for layer in sorted({p.split(".")[2] for p in self.linears()}):
            pre = "model.layers.%s." % layer
            s = lambda n: float(t[pre + n + ".input_scale"].to_f32())
            self.assertEqual(s("self_attn.q_proj"), s("self_attn.k_proj"))
            self.assertEqual(s("self_attn.q_proj"), s("self_attn.v_proj"))
            self.assertEqual(s("mlp.gate_proj"), s("mlp.up_proj"))
            for n in ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"):
                self.assertTrue(1e-6 < s(n) < 10.0, (layer, n, s(n)))


@unittest.skipUnless(os.path.exists(os.path.join(PYCODE, "config.json")), "pycode-25M not found")
class PycodeFormatsTest(FormatsTest):
    src = PYCODE


@unittest.skipUnless(os.path.exists(os.path.join(PYCODE, "tokenizer.json")), "pycode-25M tokenizer not found")
class SyntheticFormatsTest(FormatsTest):
    """Partial 128x128 blocks (dimensions 160, 200, 32) and a sharded source with an index."""

    src = "synthetic"

    @classmethod
    def src_dir(cls):
        return os.path.join(cls.tmp, "source")

    @classmethod
    def prepare(cls):
        synthetic_model(cls.src_dir())

    def test_partial_blocks(self):
        t = self.tensors["block"]
        self.assertEqual(t["model.layers.0.mlp.gate_proj.weight_scale_inv"].shape, [2, 2])  # 200 x 160
        self.assertEqual(t["model.layers.0.self_attn.k_proj.weight_scale_inv"].shape, [1, 2])  # 32 x 160
        self.assertEqual(t["model.layers.0.mlp.down_proj.weight_scale_inv"].shape, [2, 2])  # 160 x 200


if __name__ == "__main__":
    unittest.main(verbosity=2)
