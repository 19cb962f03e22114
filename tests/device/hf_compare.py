# End-to-end check of `pagellm generate --device cuda` against HF transformers on the GPU machine
# (issue 6, acceptance bullet 2). For each architecture: build a random-weight bf16 model with a real
# config and tokenizer, run HF greedy decoding for every prompt (one at a time, no padding) collecting
# the top-k logprobs per step, run pagellm on the same prompt token ids as one batch, and compare with
# vLLM's check_logprobs_close rule: at each step the chosen tokens agree, or each side's token is in
# the other's top-k; a sequence is compared up to and including its first disagreement.
#
# usage: python3 hf_compare.py --pagellm BIN --tokenizers DIR --work DIR --logs DIR ARCH [ARCH...]
#   ARCH: tiny-llama | tiny-qwen3 | llama3-8b | llama3-70b-8l | qwen3-8b | qwen3-30b-a3b-8l |
#   mixtral-8x7b-4l | phi3-mini. DIR/<llama3|qwen3>/tokenizer*.json.
# Exit status 0 only when every architecture passes.
import argparse, json, os, shutil, subprocess, sys, time

import torch
import transformers as tf
from tokenizers import Tokenizer

from hf_moe_layout import save_per_expert

L3ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
TF5 = int(tf.__version__.split(".")[0]) >= 5


def rope(theta, scaling=None):
    # transformers 5 takes rope settings as rope_parameters (carrying rope_theta); 4.x rope_theta/rope_scaling.
    if TF5:
        return {"rope_parameters": {**(scaling or {"rope_type": "default"}), "rope_theta": theta}}
    return {"rope_theta": theta, **({"rope_scaling": scaling} if scaling else {})}


# The configs of ../shared/device/make_random_model.py (real Llama-3-8B / Qwen3-8B shapes and tiny ones).
def make_config(arch):
    if arch == "llama3-8b":
        return tf.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                              rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
                              **rope(500000.0, L3ROPE))
    if arch == "llama3-70b-8l":  # Llama-3.1-70B's layer shapes, 8 layers deep (HF fp32 fits one GPU)
        return tf.LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=8,
                              num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=131072,
                              rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
                              **rope(500000.0, L3ROPE))
    if arch == "qwen3-8b":
        return tf.Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                              max_position_embeddings=40960, rms_norm_eps=1e-6, bos_token_id=151643,
                              eos_token_id=151645, tie_word_embeddings=False, **rope(1000000.0))
    if arch == "tiny-llama":
        return tf.LlamaConfig(vocab_size=128256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                              bos_token_id=128000, eos_token_id=[128001, 128009], **rope(500000.0, L3ROPE))
    if arch == "tiny-qwen3":
        return tf.Qwen3Config(vocab_size=151936, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                              max_position_embeddings=4096, bos_token_id=151643, eos_token_id=151645,
                              **rope(1000000.0))
    # The other families at real layer shapes, fewer layers where HF's fp32 needs it, with the
    # tokenizers at hand (Mixtral and Phi-3 take Llama-3's, so their vocabulary is its 128256).
    if arch == "qwen3-30b-a3b-8l":  # Qwen3-30B-A3B: 128 experts, top-8, 768 columns each
        return tf.Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=8,
                                 num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                 max_position_embeddings=40960, rms_norm_eps=1e-6, bos_token_id=151643,
                                 eos_token_id=151645, tie_word_embeddings=False, num_experts=128,
                                 num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                                 decoder_sparse_step=1, mlp_only_layers=[], **rope(1000000.0))
    if arch == "mixtral-8x7b-4l":  # Mixtral-8x7B's layers: 8 experts of 14336 columns, top-2
        return tf.MixtralConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
                                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                                rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001,
                                num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                                tie_word_embeddings=False, **rope(1000000.0))
    if arch == "phi3-mini":  # Phi-3-mini-4k: fused qkv / gate_up, window 2047
        return tf.Phi3Config(vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                             original_max_position_embeddings=4096, rms_norm_eps=1e-5, sliding_window=2047,
                             bos_token_id=128000, eos_token_id=128001, pad_token_id=None,
                             tie_word_embeddings=False, **rope(10000.0))
    # Gemma at real layer shapes with Llama-3's tokenizer, and a 64-token window so that the prompts
    # and 64 greedy steps run past it. The LM head is untied: tied to a random embedding, the
    # current token's own row wins every step (its scaled embedding rides the residual stream). Gemma 2's score cap is left off: transformers applies it in
    # eager attention only, and the fp32 reload runs its default attention (the logit cap stays).
    if arch == "gemma2-9b-6l":  # Gemma-2-9B's layers
        return tf.Gemma2Config(vocab_size=128256, hidden_size=3584, intermediate_size=14336, num_hidden_layers=6,
                               num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                               query_pre_attn_scalar=256, max_position_embeddings=8192, rms_norm_eps=1e-6,
                               sliding_window=64, attn_logit_softcapping=None, final_logit_softcapping=30.0,
                               bos_token_id=128000, eos_token_id=128001, pad_token_id=0,
                               tie_word_embeddings=False, hidden_activation="gelu_pytorch_tanh",
                               **rope(10000.0))
    if arch == "gemma3-12b-8l":  # Gemma-3-12B's layers: five sliding, one global, two sliding
        kw = dict(vocab_size=128256, hidden_size=3840, intermediate_size=15360, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
                  max_position_embeddings=131072, rms_norm_eps=1e-6, sliding_window=64,
                  bos_token_id=128000, eos_token_id=128001, pad_token_id=0, tie_word_embeddings=False,
                  hidden_activation="gelu_pytorch_tanh",
                  layer_types=["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2)
        if int(tf.__version__.split(".")[0]) >= 5:
            return tf.Gemma3TextConfig(**kw, rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        return tf.Gemma3TextConfig(**kw, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                   rope_scaling={"rope_type": "linear", "factor": 8.0})
    raise SystemExit(f"unknown arch {arch}")


PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Explain the difference between a process and a thread.",
    "1, 2, 3, 4, 5,",
    "In 1969, the Apollo 11 mission",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Translate to German: I would like a cup of coffee, please.",
    "Q: What is 17 times 23?\nA:",
    "A haiku about autumn leaves:",
    "<html><head><title>",
    "The mitochondria is the powerhouse of the cell because",
    "SELECT name, age FROM users WHERE",
    "Dear hiring manager, I am writing to apply for the position of",
    "日本の首都は",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip",
]


@torch.no_grad()
def spread_gemma_weights(model):
    """transformers' init (std 0.02, zero norms) gives a random Gemma whose scaled embedding drowns
    every normalised layer output. These weights keep the scaled embedding at unit RMS, the norms'
    (1 + w) around 1 and the matrices at 1/sqrt(fan_in), so greedy text depends on the context
    and the window."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.normal_(0.0, 0.2)
        elif "embed_tokens" in name:
            p.normal_(0.0, p.shape[1] ** -0.5)
        elif p.dim() == 2:
            p.normal_(0.0, p.shape[1] ** -0.5)


def build_model(arch, tokdir, out):
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = tf.AutoModelForCausalLM.from_config(make_config(arch), dtype=torch.bfloat16)
    model.eval()
    if arch.startswith("gemma"):
        spread_gemma_weights(model)
    model.save_pretrained(out, safe_serialization=True)
    if arch.startswith(("qwen3-30b-a3b", "mixtral")):  # the Hub's per-expert tensor names
        save_per_expert(model, out, mixtral=arch.startswith("mixtral"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), os.path.join(out, f))
    return model


@torch.no_grad()
def hf_greedy(model, ids, steps, k):
    """Greedy decoding with the KV cache; per step (chosen id, {id: logprob} of the top k)."""
    out = []
    x = torch.tensor([ids], device="cuda")
    past = None
    for _ in range(steps):
        r = model(input_ids=x, past_key_values=past, use_cache=True)
        past = r.past_key_values
        lp = torch.log_softmax(r.logits[0, -1].float(), dim=-1)
        top = torch.topk(lp, k)
        chosen = int(top.indices[0])
        out.append((chosen, {int(i): float(v) for i, v in zip(top.indices, top.values)}))
        x = torch.tensor([[chosen]], device="cuda")
    return out


def run_pagellm(bin_path, model_dir, prompt_ids, steps, k, logs, arch, max_len):
    pf = os.path.join(logs, f"{arch}.prompts.jsonl")
    with open(pf, "w") as f:
        for ids in prompt_ids:
            f.write(json.dumps({"prompt_token_ids": ids}) + "\n")
    res = os.path.join(logs, f"{arch}.pagellm.jsonl")
    cmd = [bin_path, "generate", "--device", "cuda", "--model", model_dir, "--prompts-file", pf,
           "--temperature", "0", "--max-tokens", str(steps), "--logprobs", str(k), "--ignore-eos",
           "--max-model-len", str(max_len), "--gpu-memory-utilization", "0.8", "--output", res]
    print("+", " ".join(cmd), flush=True)
    with open(os.path.join(logs, f"{arch}.pagellm.stderr"), "w") as err:
        rc = subprocess.run(cmd, stderr=err, timeout=600).returncode
    if rc != 0:
        raise RuntimeError(f"pagellm exited {rc} (see {arch}.pagellm.stderr)")
    rows = [json.loads(l) for l in open(res) if l.strip()]
    seqs = []
    for r in rows:
        seqs.append([(lp["token_id"], {int(t[0]): float(t[1]) for t in lp["top"]}) for lp in r["logprobs"]])
    return seqs


def compare(hf, pl):
    """vLLM check_logprobs_close on one sequence: (steps compared, first divergence or None, kind)."""
    n = min(len(hf), len(pl))
    for i in range(n):
        (ht, htop), (pt, ptop) = hf[i], pl[i]
        if ht == pt:
            continue
        if pt in htop and ht in ptop:
            return i + 1, i, "swap"  # allowed, but the sequences differ from here on
        return i + 1, i, "FAIL"
    return n, None, "equal"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagellm", required=True)
    ap.add_argument("--tokenizers", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("archs", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.logs, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {tf.__version__}")
    summary, all_ok = [], True
    for arch in a.archs:
        t0 = time.time()
        tokdir = os.path.join(a.tokenizers, "qwen3" if "qwen" in arch else "llama3")
        mdir = os.path.join(a.work, arch)
        try:
            model = build_model(arch, tokdir, mdir)
            tok = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
            prompt_ids = [tok.encode(p).ids for p in PROMPTS]
            hf = [hf_greedy(model, ids, a.steps, a.top) for ids in prompt_ids]
            t_hf = time.time() - t0
            del model
            torch.cuda.empty_cache()
            max_len = max(len(p) for p in prompt_ids) + a.steps + 16
            pl = run_pagellm(a.pagellm, mdir, prompt_ids, a.steps, a.top, a.logs, arch, max_len)
        except Exception as e:  # report and go on with the next architecture
            print(f"{arch}: ERROR {e}", flush=True)
            summary.append((arch, "ERROR", 0, 0, 0, str(e)))
            all_ok = False
            continue
        finally:
            shutil.rmtree(mdir, ignore_errors=True)
        compared = swaps = fails = equal = 0
        with open(os.path.join(a.logs, f"{arch}.compare.txt"), "w") as f:
            for i, (h, p) in enumerate(zip(hf, pl)):
                n, div, kind = compare(h, p)
                compared += n
                swaps += kind == "swap"
                fails += kind == "FAIL"
                equal += kind == "equal"
                f.write(f"seq {i:2d}: prompt {len(prompt_ids[i])} tokens, pagellm {len(p)} tokens, compared {n}, "
                        f"{kind}" + (f" at step {div}: hf {h[div][0]} {h[div][1]} pagellm {p[div][0]} {p[div][1]}"
                                     if div is not None else "") + "\n")
            if len(pl) != len(hf) or any(len(p) != a.steps for p in pl):
                fails += 1
                f.write("FAIL: pagellm returned the wrong number of sequences or tokens\n")
        ok = fails == 0
        all_ok &= ok
        summary.append((arch, "PASS" if ok else "FAIL", compared, equal, swaps,
                        f"{fails} failing seqs; hf {t_hf:.0f} s, total {time.time() - t0:.0f} s"))
        print(open(os.path.join(a.logs, f"{arch}.compare.txt")).read(), flush=True)
    print(f"\n| model | result | steps compared | sequences identical (of {len(PROMPTS)}) | top-{a.top} swaps | notes |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for row in summary:
        print("| " + " | ".join(str(x) for x in row) + " |")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
