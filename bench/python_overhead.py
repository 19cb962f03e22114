"""Overhead of the Python package over the C++ engine (issue 16): the same 256 prompts run through
`pagellm bench throughput --dataset` (the C++ LLM::generate, timed inside the binary) and through
pagellm.LLM.generate (timed around the Python call, output objects included), alternating.

    PYTHONPATH=build/python python3 bench/python_overhead.py --model ../shared/models/stories260K

On a GPU build (device "auto" = CUDA on both sides), --load-format dummy and --max-model-len let a
config-only folder (Llama-3.1-8B shapes) stand in for a checkpoint.

Prompts are random token ids (seeded), each --input-len long, each generating exactly --output-len
tokens (ignore_eos), as `bench throughput`'s random dataset does.
"""

import argparse
import json
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pagellm
from pagellm import LLM, SamplingParams


def write_dataset(path: Path, num_prompts: int, input_len: int, output_len: int, vocab: int):
    rng = random.Random(0)
    prompts = [[rng.randrange(10, vocab) for _ in range(input_len)] for _ in range(num_prompts)]
    with path.open("w") as f:
        for ids in prompts:
            f.write(json.dumps({"prompt_token_ids": ids, "output_len": output_len}) + "\n")
    return prompts


def cli_seconds(binary: str, model: str, dataset: Path, num_prompts: int, num_threads: int,
                out: Path, extra: list[str]) -> float:
    subprocess.run([binary, "bench", "throughput", "--model", model, "--dataset", str(dataset),
                    "--num-prompts", str(num_prompts), "--output-json", str(out),
                    "--no-enable-prefix-caching", "--num-threads", str(num_threads), *extra],
                   check=True, capture_output=True)
    return json.loads(out.read_text())["elapsed_time"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--binary", default="build/pagellm")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--num-threads", type=int, default=0, help="engine CPU threads (0 = all cores)")
    ap.add_argument("--device", default="auto",
                    help="both sides' device (auto: CUDA in a CUDA build, as LLM does; the CLI's "
                         "own default is the CPU)")
    ap.add_argument("--load-format", default="auto")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--num-kv-blocks", type=int, default=None,
                    help="each side's KV pool (on a GPU both engines are alive at once)")
    args = ap.parse_args()
    device = args.device
    if device == "auto":
        device = "cuda" if pagellm._pagellm.cuda_built else "cpu"
    extra = ["--device", device, "--load-format", args.load_format]
    engine = dict(device=device, load_format=args.load_format)
    if args.num_kv_blocks:
        extra += ["--num-kv-blocks", str(args.num_kv_blocks)]
        engine["num_kv_blocks"] = args.num_kv_blocks
    if args.max_model_len:
        extra += ["--max-model-len", str(args.max_model_len)]
        engine["max_model_len"] = args.max_model_len

    # No prefix caching on either side: the warm Python engine would otherwise find the repeated
    # prompts cached while every CLI run starts cold.
    llm = LLM(model=args.model, enable_prefix_caching=False, num_threads=args.num_threads, **engine)
    tmp = Path(tempfile.mkdtemp())
    dataset = tmp / "prompts.jsonl"
    prompts = write_dataset(dataset, args.num_prompts, args.input_len, args.output_len,
                            llm.model_info["vocab_size"])
    params = SamplingParams(temperature=1.0, max_tokens=args.output_len, ignore_eos=True)
    py_times, cli_times = [], []
    for _ in range(args.runs):
        cli_times.append(cli_seconds(args.binary, args.model, dataset, args.num_prompts,
                                     args.num_threads, tmp / "r.json", extra))
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        py_times.append(time.perf_counter() - start)
        assert sum(len(o.outputs[0].token_ids) for o in outputs) == args.num_prompts * args.output_len
    cli_med, py_med = statistics.median(cli_times), statistics.median(py_times)
    num_tokens = args.num_prompts * args.output_len
    print(f"bench throughput (C++): {', '.join(f'{t:.3f}' for t in cli_times)} s; "
          f"median {cli_med:.3f} s = {num_tokens / cli_med:,.0f} output tokens/s")
    print(f"LLM.generate (Python):  {', '.join(f'{t:.3f}' for t in py_times)} s; "
          f"median {py_med:.3f} s = {num_tokens / py_med:,.0f} output tokens/s")
    print(f"overhead: {100 * (py_med / cli_med - 1):+.1f}% median vs median, "
          f"{100 * (min(py_times) / min(cli_times) - 1):+.1f}% best vs best")


if __name__ == "__main__":
    main()
