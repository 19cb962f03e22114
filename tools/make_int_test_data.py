#!/usr/bin/python3
"""Regenerate tests/data/int_quant/: the tiny random Llama of tools/make_tiny_llama.py (seed 0)
quantized into every integer format, each folder with config.json, model.safetensors, tokenizer.json
and dequantized.json (the quantizer's dequantized weights: sha256 of the float32 bytes, sum, first
values), for the loaders' round-trip tests.

  /usr/bin/python3 tools/make_int_test_data.py [OUT_DIR]     (default tests/data/int_quant)
"""

import os
import shutil
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_tiny_llama  # noqa: E402
import quantize_int  # noqa: E402

CASES = {
    "awq-g128": ["--format", "awq"],
    "awq-g64": ["--format", "awq", "--group-size", "64"],
    "gptq-g128-sym": ["--format", "gptq", "--sym"],
    "gptq-g128-asym-actorder": ["--format", "gptq", "--asym", "--method", "gptq", "--act-order"],
    "gptq-g128-v2": ["--format", "gptq", "--asym", "--gptq-v2"],
    "gptq-8bit-g128": ["--format", "gptq", "--bits", "8", "--asym"],
    "gptq-channel": ["--format", "gptq", "--sym", "--group-size", "-1"],
    "ct-w4a16-g128": ["--format", "ct-w4a16"],
    "ct-w4a16-asym-g128": ["--format", "ct-w4a16", "--asym"],
    "ct-w8a16-channel": ["--format", "ct-w8a16", "--group-size", "-1"],
    "ct-w8a8": ["--format", "ct-w8a8"],
    "autoround-gptq": ["--format", "autoround-gptq", "--sym"],
    "autoround-awq": ["--format", "autoround-awq", "--asym"],
}


def main(argv):
    out = argv[0] if argv else os.path.join(TOOLS, "..", "tests", "data", "int_quant")
    src = tempfile.mkdtemp()
    try:
        make_tiny_llama.main([src, "--seed", "0"])
        for name, args in CASES.items():
            dest = os.path.join(out, name)
            shutil.rmtree(dest, ignore_errors=True)
            rc = quantize_int.main(args + ["--dequantize-check", "--dequantized-json", src, dest])
            if rc:
                return rc
    finally:
        shutil.rmtree(src)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
