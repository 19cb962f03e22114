#!/usr/bin/python3
"""Tests of tools/quantize_int.py and tools/intq/: the packers against hand-computed words, every
format's pack -> write -> independent unpack round trip, GPTQ and AWQ against RTN on synthetic
problems, argument errors, and the committed tests/data/int_quant/ against a fresh regeneration.

  /usr/bin/python3 tests/tools/quantize_int_test.py
"""

import contextlib
import filecmp
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_int_test_data  # noqa: E402
import quantize_fp8 as q8  # noqa: E402
import quantize_int as qi  # noqa: E402
from intq import awq, gptq, grid as gm, packing, unpack  # noqa: E402

QUIET = lambda msg: None


def as_u32(words):
    return [int(v) & 0xFFFFFFFF for v in np.asarray(words).reshape(-1)]


class PackingTest(unittest.TestCase):
    def test_sequential_nibbles(self):
        self.assertEqual(as_u32(packing.pack_rows([[1, 2, 3, 4, 5, 6, 7, 8]], 4)), [0x87654321])
        self.assertEqual(as_u32(packing.pack_rows([[15] * 8], 4)), [0xFFFFFFFF])
        self.assertEqual(as_u32(packing.pack_rows([[1, 2, 3, 4]], 8)), [0x04030201])
        self.assertEqual(as_u32(packing.pack_rows([[0xFF, 0, 0x80, 0x7F]], 8)), [0x7F8000FF])

    def test_awq_interleaved_nibbles(self):
        # Nibble i holds output column AWQ_ORDER[i] = 0, 2, 4, 6, 1, 3, 5, 7.
        self.assertEqual(as_u32(packing.pack_awq([[0, 1, 2, 3, 4, 5, 6, 7]])), [0x75316420])
        self.assertEqual(as_u32(packing.pack_awq([[9, 0, 0, 0, 0, 0, 0, 0]])), [0x00000009])
        self.assertEqual(as_u32(packing.pack_awq([[0, 9, 0, 0, 0, 0, 0, 0]])), [0x00090000])

    def test_independent_unpackers_invert_the_packers(self):
        rng = np.random.default_rng(1)
        for bits in (4, 8):
            v = rng.integers(0, 1 << bits, size=(6, 64))
            np.testing.assert_array_equal(unpack.unpack_words(packing.pack_rows(v, bits), bits, 1), v)
            np.testing.assert_array_equal(unpack.unpack_words(packing.pack_rows(v, bits).T, bits, 0), v.T)
        v = rng.integers(0, 16, size=(5, 32))
        np.testing.assert_array_equal(unpack.unpack_awq_words(packing.pack_awq(v)), v)
        self.assertEqual(unpack.unpack_awq_words(np.array([[0x75316420]], np.uint32).view(np.int32)).tolist(),
                         [[0, 1, 2, 3, 4, 5, 6, 7]])

    def test_range_errors(self):
        with self.assertRaises(ValueError):
            packing.pack_rows([[16] * 8], 4)
        with self.assertRaises(ValueError):
            packing.pack_rows([[1] * 6], 4)


def random_linear(rng, out, k, grid, permuted=False):
    """A QuantizedLinear with every code and zero point in range (v1 formats: zero >= 1)."""
    ng = grid.num_groups(k)
    q = rng.integers(0, grid.maxq + 1, size=(out, k)).astype(np.int32)
    if grid.sym:
        zero = np.full((ng, out), (grid.maxq + 1) // 2, np.int32)
    else:
        zero = rng.integers(grid.zero_min, grid.maxq + 1, size=(ng, out)).astype(np.int32)
    scale = gm.round_to_dtype(rng.uniform(1e-4, 0.05, size=(ng, out)), grid.scale_dtype)
    g_idx = gm.default_g_idx(k, grid)
    if permuted:
        g_idx = rng.permutation(g_idx).astype(np.int32)
    return gm.QuantizedLinear(q, scale, zero, g_idx, grid)


def write_one(folder, fmt, ql, grid, gptq_v2=False, desc_act=False):
    os.makedirs(folder, exist_ok=True)
    tensors = packing.format_tensors(fmt, "model.layers.0.mlp.down_proj", ql, gptq_v2)
    q8.write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"quantization_config": packing.quantization_config(fmt, grid, desc_act, False, gptq_v2)}, f)
    return unpack.dequantize_folder(folder, {"model.layers.0.mlp.down_proj": ql.shape})["model.layers.0.mlp.down_proj"]


class RoundTripTest(unittest.TestCase):
    CASES = [  # fmt, bits, group, sym, gptq_v2, act-order
        ("awq", 4, 128, False, False, False), ("awq", 4, 64, True, False, False), ("awq", 4, -1, False, False, False),
        ("gptq", 4, 128, True, False, False), ("gptq", 4, 128, False, False, True), ("gptq", 4, 128, False, True, True),
        ("gptq", 8, 128, False, False, False), ("gptq", 8, -1, True, True, False), ("gptq", 4, -1, False, False, False),
        ("ct-w4a16", 4, 128, True, False, False), ("ct-w4a16", 4, 32, False, False, False),
        ("ct-w8a16", 8, -1, True, False, False), ("ct-w8a16", 8, 128, False, False, False),
        ("ct-w8a8", 8, -1, True, False, False),
        ("autoround-gptq", 4, 128, False, False, False), ("autoround-awq", 4, 128, False, False, False)]

    def test_every_format(self):
        rng = np.random.default_rng(7)
        with tempfile.TemporaryDirectory() as tmp:
            for i, (fmt, bits, gs, sym, v2, ao) in enumerate(self.CASES):
                with self.subTest(fmt=fmt, bits=bits, group=gs, sym=sym, v2=v2, act_order=ao):
                    grid = packing.grid_for(fmt, bits, gs, sym, "BF16", v2)
                    ql = random_linear(rng, 64, 256, grid, ao)
                    got = write_one(os.path.join(tmp, str(i)), fmt, ql, grid, v2, ao)
                    np.testing.assert_array_equal(got, ql.dequantize())

    def test_gptq_v1_stores_zero_minus_one(self):
        grid = packing.grid_for("gptq", 4, 128, False)
        self.assertEqual(grid.zero_min, 1)
        ql = random_linear(np.random.default_rng(3), 8, 128, grid)
        ql.zero[:] = 1
        words = packing.format_tensors("gptq", "x", ql)["x.qzeros"].data
        self.assertEqual(as_u32(words), [0])
        v2 = packing.format_tensors("gptq", "x", ql, gptq_v2=True)["x.qzeros"].data
        self.assertEqual(as_u32(v2), [0x11111111])

    def test_ct_signed_storage(self):
        grid = packing.grid_for("ct-w8a8", 8, -1, True)
        ql = random_linear(np.random.default_rng(4), 4, 8, grid)
        t = packing.format_tensors("ct-w8a8", "x", ql)
        np.testing.assert_array_equal(t["x.weight"].data.reshape(4, 8), ql.q - 128)
        self.assertEqual(t["x.weight_scale"].shape, [4, 1])
        self.assertEqual(t["x.weight_scale"].dtype, "BF16")


def correlated_inputs(rng, n, k, outliers=()):
    x = rng.standard_normal((n, k)) @ (np.eye(k) + 0.3 * rng.standard_normal((k, k)))
    x[:, list(outliers)] *= 30.0
    return x.astype(np.float32)


def output_error(x, w, deq):
    return float(np.mean((x @ w.T - x @ deq.T) ** 2))


class MethodsTest(unittest.TestCase):
    def test_gptq_beats_rtn(self):
        rng = np.random.default_rng(5)
        x = correlated_inputs(rng, 1024, 256)
        w = (0.02 * rng.standard_normal((128, 256))).astype(np.float32)
        grid = gm.Grid(4, 64, False)
        e_rtn = output_error(x, w, gm.rtn(w, grid).dequantize())
        for act_order, static in ((False, False), (True, False), (True, True)):
            ql = gptq.gptq(w, x, grid, act_order, static)
            e = output_error(x, w, ql.dequantize())
            self.assertLess(e, 0.8 * e_rtn, (act_order, static))
            self.assertEqual(np.bincount(ql.g_idx).tolist(), [64] * 4)
            self.assertEqual(ql.trivial_g_idx(), not act_order or static)

    def test_gptq_channel_and_8bit(self):
        rng = np.random.default_rng(6)
        x = correlated_inputs(rng, 512, 128)
        w = (0.02 * rng.standard_normal((64, 128))).astype(np.float32)
        for grid in (gm.Grid(4, -1, True), gm.Grid(8, 128, False)):
            e_rtn = output_error(x, w, gm.rtn(w, grid).dequantize())
            self.assertLess(output_error(x, w, gptq.gptq(w, x, grid).dequantize()), e_rtn)

    def test_awq_beats_rtn_with_outlier_channels(self):
        rng = np.random.default_rng(8)
        x = correlated_inputs(rng, 512, 256, outliers=(3, 77, 150, 201))
        w = (0.02 * rng.standard_normal((192, 256))).astype(np.float32)
        grid = gm.Grid(4, 128, False)
        e_rtn = output_error(x, w, gm.rtn(w, grid).dequantize())
        s = awq.search_scales(x, [w], grid, 20)
        self.assertGreater(s[[3, 77, 150, 201]].mean(), np.median(s))
        deq = gm.rtn(w * s, grid).dequantize() / s  # the scaled weight seen through x / s
        e_awq = output_error(x, w, deq)
        self.assertLess(e_awq, 0.8 * e_rtn)
        e_clip = output_error(x, w, awq.clipped_rtn(w, x, grid).dequantize())
        self.assertLessEqual(e_clip, e_rtn * (1 + 1e-6))

    def test_grid(self):
        g = gm.Grid(4, -1, True)
        s, z = g.params(np.array([[-0.7, 0.1, 0.35]], np.float32))
        self.assertEqual(z.tolist(), [8])
        self.assertAlmostEqual(float(s[0]), float(np.float16(1.4 / 15)), places=6)
        q = g.quantize(np.array([[-0.7, 0.0, 0.7]], np.float32), s[:, None], z[:, None])
        self.assertEqual(q.tolist(), [[0, 8, 15]])
        s, z = gm.Grid(4, -1, False, zero_min=1).params(np.array([[0.0, 0.5, 1.5]], np.float32))
        self.assertEqual(z.tolist(), [1])  # 0 would wrap in GPTQ v1's z - 1
        self.assertEqual(gm.f32_to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875], np.float32)).tolist(),
                         [0x3F80, 0x3F80, 0x3F82])  # ties to even


class ModelTest(unittest.TestCase):
    def test_awq_folding_keeps_the_function(self):
        from intq import model as mm
        m = mm.Model(TINY)
        ids = mm.calibration_ids(TINY, "def f(x):\n    return x * 2\n" * 20, 2, 64)
        before = m.nll(ids[0])
        x = m.embed(ids)
        awq.scale_layer(m, 0, x, gm.Grid(4, 128, False), 10)
        self.assertEqual(awq.folded_names(m), ["model.layers.0.input_layernorm.weight",
                                               "model.layers.0.post_attention_layernorm.weight"])
        self.assertAlmostEqual(m.nll(ids[0]), before, delta=1e-4 * before)

    def test_dynamic_int8_inputs(self):
        from intq import model as mm
        m = mm.Model(TINY)
        x = np.zeros((1, 1, 256), np.float32)
        x[0, 0, :3] = [1.0, -0.5, 0.3333]
        w = "model.layers.0.self_attn.q_proj.weight"
        m.dynamic_int8_inputs = True
        got = m.linear(w, x)
        xq = np.zeros_like(x)
        xq[0, 0, :3] = np.array([127, -64, 42], np.float32) / np.float32(127.0)  # rint(x * 127) / 127
        np.testing.assert_allclose(got, xq @ m.w(w).T, rtol=1e-5, atol=1e-7)

    def test_quantized_model_writes_and_scores(self):
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()):
            text = os.path.join(tmp, "t.txt")
            with open(text, "w") as f:
                f.write("import os\nprint(os.getcwd())\n" * 8)
            out = os.path.join(tmp, "awq")
            self.assertEqual(qi.main(["--format", "ct-w4a16", "--method", "awq", "--asym", "--dequantize-check",
                                      "--eval-ppl", text, "--calibration-sequences", "2", TINY, out]), 0)
            t = q8.read_checkpoint(out)
            src = q8.read_checkpoint(TINY)
            norm = "model.layers.0.input_layernorm.weight"
            self.assertEqual(t[norm].dtype, "BF16")
            self.assertFalse(np.array_equal(t[norm].data, src[norm].data))  # AWQ folded its scales
            np.testing.assert_array_equal(t["lm_head.weight"].data, src["lm_head.weight"].data)


class ArgumentsTest(unittest.TestCase):
    def run_main(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                rc = qi.main(argv)
            except SystemExit as e:
                rc = e.code
        return rc, err.getvalue()

    def test_bad_arguments(self):
        for argv, pattern in (
                (["--format", "gptq", "--bits", "3", "a", "b"], "invalid choice: 3"),
                (["--format", "awq", "--bits", "8", "SRC", "OUT"], "awq stores 4-bit weights only"),
                (["--format", "ct-w8a8", "--group-size", "128", "SRC", "OUT"], "per-channel"),
                (["--format", "ct-w4a16", "--bits", "8", "SRC", "OUT"], "stores 4-bit weights, not 8"),
                (["--format", "awq", "--gptq-v2", "SRC", "OUT"], "--gptq-v2 applies to --format gptq"),
                (["--format", "awq", "--act-order", "SRC", "OUT"], "--act-order is a GPTQ option"),
                (["--format", "gptq", "--group-size", "100", "SRC", "OUT"], "not a multiple of the group size"),
                (["--format", "gptq", "SRC"], "OUT and --format are required"),
                (["--method", "none", "SRC", "OUT"], "--method none evaluates the source")):
            with self.subTest(argv=argv):
                argv = [a.replace("SRC", TINY) for a in argv]
                rc, err = self.run_main(argv)
                self.assertNotEqual(rc, 0)
                self.assertIn(pattern, err)


class CommittedDataTest(unittest.TestCase):
    def test_regeneration_is_identical(self):
        committed = os.path.join(ROOT, "tests", "data", "int_quant")
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(make_int_test_data.main([tmp]), 0)
            for name in make_int_test_data.CASES:
                for f in ("config.json", "model.safetensors", "dequantized.json", "tokenizer.json"):
                    with self.subTest(case=name, file=f):
                        self.assertTrue(filecmp.cmp(os.path.join(tmp, name, f), os.path.join(committed, name, f),
                                                    shallow=False))
        self.assertTrue(os.path.exists(os.path.join(committed, "READY")))

    def test_act_order_case_has_a_real_permutation(self):
        t = q8.read_checkpoint(os.path.join(ROOT, "tests", "data", "int_quant", "gptq-g128-asym-actorder"))
        g = t["model.layers.0.self_attn.q_proj.g_idx"].data
        self.assertFalse(np.all(np.diff(g) >= 0))
        self.assertEqual(np.bincount(g).tolist(), [128, 128])


TINY = None


def setUpModule():
    global TINY
    TINY = tempfile.mkdtemp()
    import make_tiny_llama
    make_tiny_llama.main([TINY])


def tearDownModule():
    shutil.rmtree(TINY)


if __name__ == "__main__":
    unittest.main()
